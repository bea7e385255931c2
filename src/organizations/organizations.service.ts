import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import { setCurrentOrganization, clearCurrentOrganization } from '../accounts/accounts.repository.ts';
import { requireOrganization, roleAtLeast, type Role, type SessionPrincipal } from '../principal.ts';
import type { SessionStore } from '../accounts/sessions.ts';
import type { ApiKeysService } from '../api-keys/api-keys.service.ts';
import { revokeKeysCreatedBy } from '../api-keys/api-keys.repository.ts';
import { insertBillingAccount } from '../billing/billing.repository.ts';
import { randomToken } from '../crypto.ts';
import { announceChange, CHANGE_CHANNELS } from '../db/change-listener.ts';
import type { OrganizationRow } from '../db/models/organizations.ts';
import { retryingTransaction } from '../db/transactions.ts';
import { transferDeployments } from '../deployments/deployments.repository.ts';
import { AppError } from '../errors.ts';
import { revokePendingInvitationsBy } from '../invitations/invitations.repository.ts';
import { notBlank } from '../validation.ts';
import {
  deleteMembership,
  findMember,
  findOrganization,
  insertMembership,
  insertOrganization,
  listMembers,
  lockOrganization,
  membershipsOf,
  otherSuperAdmin,
  setMembershipRole,
  slugTaken,
  updateOrganization,
  type MemberView,
} from './organizations.repository.ts';

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
  readonly #apiKeys: Pick<ApiKeysService, 'forget'>;
  readonly #maxActiveResources: number;

  constructor(deps: { db: Knex; sessions: SessionStore; apiKeys: Pick<ApiKeysService, 'forget'>; maxActiveResources: number }) {
    this.#db = deps.db;
    this.#sessions = deps.sessions;
    this.#apiKeys = deps.apiKeys;
    this.#maxActiveResources = deps.maxActiveResources;
  }

  /**
   * Creates an organization with its owner (`super_admin`) and its billing account, and makes it the
   * owner's current organization, in the caller's transaction. A taken slug gets a random suffix.
   */
  async createWithOwner(trx: Knex.Transaction, input: { name: string; ownerId: number }): Promise<OrganizationRow> {
    const base = slugify(input.name);
    const slug = (await slugTaken(trx, base)) ? `${base}-${randomToken(5).slice(0, 6)}` : base;
    const organization = await insertOrganization(trx, { name: input.name, slug });
    await insertMembership(trx, { organization_id: organization.id, user_id: input.ownerId, role: 'super_admin' });
    await insertBillingAccount(trx, { organization_id: organization.id, max_active_resources: this.#maxActiveResources });
    await setCurrentOrganization(trx, input.ownerId, organization.id);
    return organization;
  }

  async get(principal: SessionPrincipal): Promise<Organization> {
    const { id } = requireOrganization(principal);
    const row = await findOrganization(this.#db, id);
    if (!row) throw new AppError('NOT_FOUND', 'Your organization no longer exists.');
    return toOrganization(row, principal);
  }

  async update(principal: SessionPrincipal, input: UpdateOrganizationRequest): Promise<Organization> {
    const { id } = requireOrganization(principal);
    const changes: { name?: string; description?: string | null } = {};
    if (input.name !== undefined) changes.name = notBlank(input.name, 'body/name');
    if (input.description !== undefined) changes.description = input.description;
    const row = await updateOrganization(this.#db, id, changes);
    if (!row) throw new AppError('NOT_FOUND', 'Your organization no longer exists.');
    return toOrganization(row, principal);
  }

  async members(principal: SessionPrincipal): Promise<Member[]> {
    const { id } = requireOrganization(principal);
    return (await listMembers(this.#db, id)).map(toMember);
  }

  /** Gives a member another role; only a super_admin touches admins and super_admins. */
  async changeRole(principal: SessionPrincipal, userId: number, role: Role): Promise<Member> {
    const organization = requireOrganization(principal);
    return retryingTransaction(this.#db, async (trx) => {
      const { member, actorRole } = await lockForChange(trx, organization, principal, userId);
      if (!roleAtLeast(actorRole, 'admin')) throw new AppError('FORBIDDEN', 'Changing a role needs the role admin or higher.');
      if ((GUARDED_ROLES.has(member.role) || GUARDED_ROLES.has(role)) && !roleAtLeast(actorRole, 'super_admin')) {
        throw new AppError('FORBIDDEN', 'Only a super_admin may change the role of an admin or super_admin, or give those roles.');
      }
      if (member.role === 'super_admin' && role !== 'super_admin') await assertAnotherSuperAdmin(trx, organization.id, userId);
      if (member.role !== role) await setMembershipRole(trx, member.id, role);
      const changed = await findMember(trx, organization.id, member.id);
      if (!changed) throw new Error(`membership ${member.id} vanished inside its own transaction`);
      return toMember(changed);
    });
  }

  /**
   * Removes a member (or the caller, who leaves). In the same transaction their sessions in this
   * organization end, and their deployments here pass to the caller (or, when they leave, to the
   * longest-standing super_admin). The API keys they created here and their pending invitations
   * here are revoked (every process drops the keys from its cache on commit), unless the caller
   * chose to keep them (`keepCredentials`): an evicted admin leaves nothing that still works. A
   * transaction Postgres breaks on a deadlock with another one (a provisioning step of one of the
   * deployments, say) runs again.
   */
  async removeMember(principal: SessionPrincipal, userId: number, options: { keepCredentials?: boolean } = {}): Promise<void> {
    const organization = requireOrganization(principal);
    const leaving = userId === principal.user.id;
    if (!leaving && !roleAtLeast(principal.role, 'admin')) {
      throw new AppError('FORBIDDEN', `Removing a member needs the role admin or higher in ${organization.name}; you may only leave it yourself.`);
    }
    const revokedKeys = await retryingTransaction(this.#db, async (trx) => {
      const { member, actorRole } = await lockForChange(trx, organization, principal, userId);
      if (!leaving && !roleAtLeast(actorRole, 'admin')) throw new AppError('FORBIDDEN', 'Removing a member needs the role admin or higher.');
      if (!leaving && GUARDED_ROLES.has(member.role) && !roleAtLeast(actorRole, 'super_admin')) {
        throw new AppError('FORBIDDEN', 'Only a super_admin may remove an admin or super_admin.');
      }
      if (member.role === 'super_admin') await assertAnotherSuperAdmin(trx, organization.id, userId);
      const heir = leaving ? await longestStandingSuperAdmin(trx, organization.id, userId) : principal.user.id;
      await transferDeployments(trx, { organizationId: organization.id, fromUserId: userId, toUserId: heir });
      await deleteMembership(trx, member.id);
      await clearCurrentOrganization(trx, userId, organization.id);
      await this.#sessions.invalidateInOrganization(trx, userId, organization.id);
      if (options.keepCredentials) return [];
      const keyIds = await revokeKeysCreatedBy(trx, organization.id, userId);
      for (const keyId of keyIds) await announceChange(trx, CHANGE_CHANNELS.apiKey, keyId);
      await revokePendingInvitationsBy(trx, organization.id, userId);
      return keyIds;
    });
    for (const keyId of revokedKeys) this.#apiKeys.forget(keyId);
  }
}

function toMember(row: MemberView): Member {
  return { id: row.id, user_id: row.user_id, email: row.email, name: row.name, role: row.role, joined_at: row.created_at };
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
  await lockOrganization(trx, organization.id);
  const rows = await membershipsOf(trx, organization.id, [userId, principal.user.id]);
  const actor = rows.find((row) => row.user_id === principal.user.id);
  if (!actor) throw new AppError('FORBIDDEN', `You are no longer a member of ${organization.name}.`);
  const member = rows.find((row) => row.user_id === userId);
  if (!member) throw new AppError('NOT_FOUND', `User ${userId} is not a member of ${organization.name}.`);
  return { member, actorRole: actor.role };
}

async function assertAnotherSuperAdmin(trx: Knex.Transaction, organizationId: number, userId: number): Promise<void> {
  if (!(await otherSuperAdmin(trx, organizationId, userId))) {
    throw new AppError('LAST_SUPER_ADMIN', 'This is the organization’s only super_admin: make someone else super_admin first.');
  }
}

async function longestStandingSuperAdmin(trx: Knex.Transaction, organizationId: number, exceptUserId: number): Promise<number> {
  const row = await otherSuperAdmin(trx, organizationId, exceptUserId);
  if (!row) throw new Error(`organization ${organizationId} has no other super_admin`);
  return row.user_id;
}

/** A URL-safe slug of a name: lower-case ASCII letters, digits and single dashes. */
export function slugify(name: string): string {
  const slug = name
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 48)
    .replace(/-+$/g, '');
  return slug || 'organization';
}

function toOrganization(row: OrganizationRow, principal: SessionPrincipal): Organization {
  return {
    id: row.id,
    name: row.name,
    slug: row.slug,
    description: row.description ?? null,
    status: row.status,
    role: principal.role ?? 'viewer',
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}
