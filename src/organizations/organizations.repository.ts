import type { Knex } from 'knex';
import { roleAtLeast, ROLES, type Role } from '../principal.ts';
import { MembershipRow } from '../db/models/memberships.ts';
import { OrganizationRow } from '../db/models/organizations.ts';
import { isoTimes, utcTextSql } from '../db/query.ts';

/** Every query of the organizations area: organizations and their memberships. */
type Db = Knex | Knex.Transaction;

// ---- organizations

export async function slugTaken(db: Db, slug: string): Promise<boolean> {
  return Boolean(await OrganizationRow.query(db).where({ slug }).select('id').first());
}

export async function insertOrganization(db: Db, organization: Pick<OrganizationRow, 'name' | 'slug'>): Promise<OrganizationRow> {
  return OrganizationRow.query(db).insert(organization).returning('*');
}

export async function findOrganization(db: Db, organizationId: number): Promise<OrganizationRow | undefined> {
  return OrganizationRow.query(db).findById(organizationId);
}

/** The organization after the changes (as it is when there are none); undefined when it is gone. */
export async function updateOrganization(
  db: Db,
  organizationId: number,
  changes: Partial<Pick<OrganizationRow, 'name' | 'description'>>,
): Promise<OrganizationRow | undefined> {
  if (!Object.keys(changes).length) return findOrganization(db, organizationId);
  const [row] = await OrganizationRow.query(db).where({ id: organizationId }).patch(changes).returning('*');
  return row;
}

/**
 * Locks the organization's row against other member changes: they run one at a time. The lock is
 * FOR NO KEY UPDATE, which a foreign key check (FOR KEY SHARE) does not wait for: a provisioning step
 * holds its deployment's row, then appends an event that names the organization, while a member
 * change holds this lock, then hands the member's deployments on; with FOR UPDATE here each waited
 * for the other (a deadlock, 40P01).
 */
export async function lockOrganization(trx: Knex.Transaction, organizationId: number): Promise<void> {
  await OrganizationRow.query(trx).findById(organizationId).forNoKeyUpdate().select('id');
}

// ---- members

/** A membership with the member's email and name, as the interface lists members. */
export interface MemberView {
  id: number;
  user_id: number;
  email: string;
  name: string;
  role: Role;
  /** When the membership began, as the API writes times. */
  created_at: string;
}

/** Plain rows, the time read as UTC text (`utcTextSql`): an organization lists hundreds of members. */
function membersOf(db: Db, organizationId: number) {
  return db('memberships as m')
    .join('users as u', 'u.id', 'm.user_id')
    .where('m.organization_id', organizationId)
    .select('m.id', 'm.user_id', 'u.email', 'u.name', 'm.role', db.raw(utcTextSql('m.created_at', 'created_at')));
}

/** The organization's members, oldest membership first. */
export async function listMembers(db: Db, organizationId: number): Promise<MemberView[]> {
  return isoTimes(await membersOf(db, organizationId).orderBy([{ column: 'm.created_at' }, { column: 'm.id' }]), ['created_at']);
}

export async function findMember(db: Db, organizationId: number, membershipId: number): Promise<MemberView | undefined> {
  const row: MemberView | undefined = await membersOf(db, organizationId).where('m.id', membershipId).first();
  return row && isoTimes([row], ['created_at'])[0];
}

/** Whether someone with this email (lower-cased) is a member of the organization. */
export async function isMemberByEmail(db: Db, organizationId: number, email: string): Promise<boolean> {
  return Boolean(await membersOf(db, organizationId).whereRaw('lower(u.email) = ?', [email]).first());
}

export async function findMembership(db: Db, organizationId: number, userId: number): Promise<MembershipRow | undefined> {
  return MembershipRow.query(db).where({ organization_id: organizationId, user_id: userId }).first();
}

/** The memberships of these users in the organization (those who have one). */
export async function membershipsOf(db: Db, organizationId: number, userIds: readonly number[]): Promise<MembershipRow[]> {
  return MembershipRow.query(db).where({ organization_id: organizationId }).whereIn('user_id', userIds);
}

/** The longest-standing super_admin of the organization other than `exceptUserId`, if any. */
export async function otherSuperAdmin(db: Db, organizationId: number, exceptUserId: number): Promise<MembershipRow | undefined> {
  return MembershipRow.query(db)
    .where({ organization_id: organizationId, role: 'super_admin' })
    .whereNot({ user_id: exceptUserId })
    .orderBy([{ column: 'created_at' }, { column: 'id' }])
    .first();
}

/** Adds a member; fails on the (organization_id, user_id) unique constraint when they are one already. */
export async function insertMembership(db: Db, membership: Pick<MembershipRow, 'organization_id' | 'user_id' | 'role'>): Promise<void> {
  await MembershipRow.query(db).insert(membership);
}

export async function setMembershipRole(db: Db, membershipId: number, role: Role): Promise<void> {
  await MembershipRow.query(db).findById(membershipId).patch({ role });
}

export async function deleteMembership(db: Db, membershipId: number): Promise<void> {
  await MembershipRow.query(db).deleteById(membershipId);
}

/** The organization's admins and super admins (who are told of billing and webhook trouble), oldest membership first. */
export async function adminsOf(db: Db, organizationId: number): Promise<Array<{ email: string; name: string }>> {
  return MembershipRow.query(db)
    .alias('m')
    .join('users as u', 'u.id', 'm.user_id')
    .where('m.organization_id', organizationId)
    .whereIn('m.role', ROLES.filter((role) => roleAtLeast(role, 'admin')))
    .orderBy('m.id')
    .select('u.email', 'u.name')
    .castTo<Array<{ email: string; name: string }>>();
}

/** The lists whose versions `organization_list_versions` keeps, by the column that holds each. */
export type VersionedList = 'invitations' | 'api_keys' | 'deployment_options';

/** The version of one of the organization's lists (raised by a trigger at the commit of every change it shows; 0 before any). */
export async function listVersionOf(db: Db, organizationId: number, list: VersionedList): Promise<string> {
  const row = (await db('organization_list_versions').where({ organization_id: organizationId }).first(list)) as Record<VersionedList, string | number> | undefined;
  return String(row?.[list] ?? 0);
}
