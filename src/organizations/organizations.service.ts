import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import { roleAtLeast, type Role, type SessionPrincipal } from '../accounts/principal.ts';
import { notBlank } from '../accounts/accounts.service.ts';
import type { SessionStore } from '../accounts/sessions.ts';
import { AppError } from '../errors.ts';

type Organization = components['schemas']['Organization'];
type Member = components['schemas']['Member'];
type UpdateOrganizationRequest = components['schemas']['UpdateOrganizationRequest'];

/** Roles only a super_admin may give, or change or remove the holder of. */
const GUARDED_ROLES: ReadonlySet<Role> = new Set(['admin', 'super_admin']);

/**
 * The caller's current organization and its members. The operation's minimum role is checked
 * before these run; the rules that depend on the member concerned are checked here.
 */
export class OrganizationsService {
  readonly #db: Knex;
  readonly #sessions: SessionStore;

  constructor(db: Knex, sessions: SessionStore) {
    this.#db = db;
    this.#sessions = sessions;
  }

  async get(principal: SessionPrincipal): Promise<Organization> {
    const { id } = requireOrganization(principal);
    const row = await this.#db('organizations').where({ id }).first();
    if (!row) throw new AppError('NOT_FOUND', 'Your organization no longer exists.');
    return toOrganization(row, principal);
  }

  async update(principal: SessionPrincipal, input: UpdateOrganizationRequest): Promise<Organization> {
    const { id } = requireOrganization(principal);
    const changes: Record<string, string | null> = {};
    if (input.name !== undefined) changes.name = notBlank(input.name, 'body/name');
    if (input.description !== undefined) changes.description = input.description;
    const [row] = Object.keys(changes).length
      ? await this.#db('organizations').where({ id }).update(changes).returning('*')
      : await this.#db('organizations').where({ id }).select('*');
    if (!row) throw new AppError('NOT_FOUND', 'Your organization no longer exists.');
    return toOrganization(row, principal);
  }

  async members(principal: SessionPrincipal): Promise<Member[]> {
    const { id } = requireOrganization(principal);
    const rows = await membersQuery(this.#db, id).orderBy([{ column: 'm.created_at' }, { column: 'm.id' }]);
    return rows.map(toMember);
  }

  /** Gives a member another role; only a super_admin touches admins and super_admins. */
  async changeRole(principal: SessionPrincipal, userId: number, role: Role): Promise<Member> {
    const organization = requireOrganization(principal);
    return this.#db.transaction(async (trx) => {
      const { member, actorRole } = await lockForChange(trx, organization, principal, userId);
      if (!roleAtLeast(actorRole, 'admin')) throw new AppError('FORBIDDEN', 'Changing a role needs the role admin or higher.');
      if ((GUARDED_ROLES.has(member.role) || GUARDED_ROLES.has(role)) && !roleAtLeast(actorRole, 'super_admin')) {
        throw new AppError('FORBIDDEN', 'Only a super_admin may change the role of an admin or super_admin, or give those roles.');
      }
      if (member.role === 'super_admin' && role !== 'super_admin') await assertAnotherSuperAdmin(trx, organization.id, userId);
      if (member.role !== role) await trx('memberships').where({ id: member.id }).update({ role });
      return toMember(await membersQuery(trx, organization.id).where('m.id', member.id).first());
    });
  }

  /**
   * Removes a member (or the caller, who leaves). In the same transaction their sessions in this
   * organization end, and their deployments here pass to the caller (or, when they leave, to the
   * longest-standing super_admin). API keys and invitations belong to the organization and stay.
   */
  async removeMember(principal: SessionPrincipal, userId: number): Promise<void> {
    const organization = requireOrganization(principal);
    const leaving = userId === principal.user.id;
    if (!leaving && !roleAtLeast(principal.role, 'admin')) {
      throw new AppError('FORBIDDEN', `Removing a member needs the role admin or higher in ${organization.name}; you may only leave it yourself.`);
    }
    await this.#db.transaction(async (trx) => {
      const { member, actorRole } = await lockForChange(trx, organization, principal, userId);
      if (!leaving && !roleAtLeast(actorRole, 'admin')) throw new AppError('FORBIDDEN', 'Removing a member needs the role admin or higher.');
      if (!leaving && GUARDED_ROLES.has(member.role) && !roleAtLeast(actorRole, 'super_admin')) {
        throw new AppError('FORBIDDEN', 'Only a super_admin may remove an admin or super_admin.');
      }
      if (member.role === 'super_admin') await assertAnotherSuperAdmin(trx, organization.id, userId);
      const heir = leaving ? await longestStandingSuperAdmin(trx, organization.id, userId) : principal.user.id;
      await trx('deployments').where({ organization_id: organization.id, user_id: userId }).update({ user_id: heir });
      await trx('memberships').where({ id: member.id }).delete();
      await trx('users').where({ id: userId, current_organization_id: organization.id }).update({ current_organization_id: null });
      await this.#sessions.invalidateInOrganization(trx, userId, organization.id);
    });
  }
}

interface MemberRow {
  id: number;
  user_id: number;
  email: string;
  name: string;
  role: Role;
  created_at: Date;
}

function membersQuery(db: Knex | Knex.Transaction, organizationId: number): Knex.QueryBuilder {
  return db('memberships as m')
    .join('users as u', 'u.id', 'm.user_id')
    .where('m.organization_id', organizationId)
    .select('m.id', 'm.user_id', 'u.email', 'u.name', 'm.role', 'm.created_at');
}

function toMember(row: MemberRow): Member {
  return { id: row.id, user_id: row.user_id, email: row.email, name: row.name, role: row.role, joined_at: row.created_at.toISOString() };
}

/**
 * Locks the organization's row, then reads the member concerned and the caller's own role as they
 * are now: changes to one organization's members run one at a time, so two super_admins cannot
 * demote each other at once, and a caller demoted a moment ago acts with their new role.
 */
async function lockForChange(
  trx: Knex.Transaction,
  organization: { id: number; name: string },
  principal: SessionPrincipal,
  userId: number,
): Promise<{ member: { id: number; role: Role }; actorRole: Role | null }> {
  await trx('organizations').where({ id: organization.id }).forUpdate().first('id');
  const rows: Array<{ id: number; user_id: number; role: Role }> = await trx('memberships')
    .where({ organization_id: organization.id })
    .whereIn('user_id', [userId, principal.user.id])
    .select('id', 'user_id', 'role');
  const actor = rows.find((row) => row.user_id === principal.user.id);
  if (!actor) throw new AppError('FORBIDDEN', `You are no longer a member of ${organization.name}.`);
  const member = rows.find((row) => row.user_id === userId);
  if (!member) throw new AppError('NOT_FOUND', `User ${userId} is not a member of ${organization.name}.`);
  return { member, actorRole: actor.role };
}

async function assertAnotherSuperAdmin(trx: Knex.Transaction, organizationId: number, userId: number): Promise<void> {
  const other = await trx('memberships').where({ organization_id: organizationId, role: 'super_admin' }).whereNot({ user_id: userId }).first('id');
  if (!other) {
    throw new AppError('LAST_SUPER_ADMIN', 'This is the organization’s only super_admin: make someone else super_admin first.');
  }
}

async function longestStandingSuperAdmin(trx: Knex.Transaction, organizationId: number, exceptUserId: number): Promise<number> {
  const row = await trx('memberships')
    .where({ organization_id: organizationId, role: 'super_admin' })
    .whereNot({ user_id: exceptUserId })
    .orderBy([{ column: 'created_at' }, { column: 'id' }])
    .first('user_id');
  if (!row) throw new Error(`organization ${organizationId} has no other super_admin`);
  return row.user_id;
}

export function requireOrganization(principal: SessionPrincipal): { id: number; name: string } {
  if (!principal.organization) throw new AppError('FORBIDDEN', 'You have no organization yet: complete your profile first.');
  return principal.organization;
}

function toOrganization(row: Record<string, unknown>, principal: SessionPrincipal): Organization {
  return {
    id: row.id as number,
    name: row.name as string,
    slug: row.slug as string,
    description: (row.description as string | null) ?? null,
    status: row.status as string,
    role: principal.role ?? 'viewer',
    created_at: (row.created_at as Date).toISOString(),
    updated_at: (row.updated_at as Date).toISOString(),
  };
}
