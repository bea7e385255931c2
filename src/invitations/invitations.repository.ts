import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import { InvitationRow } from '../db/models/invitations.ts';
import { isoTimes, utcTextSql } from '../db/query.ts';
import { lapsedSql, openSql, statusSql } from './invitation-status.ts';

export type Invitation = components['schemas']['Invitation'];

/** Every query of the invitations area. */
type Db = Knex | Knex.Transaction;

/**
 * An invitation as the API shows it: with its organization's name, its status as of now, its
 * email's delivery, and its times as the API writes them.
 */
export interface InvitationView {
  id: number;
  organization_id: number;
  organization_name: string;
  invitee_email: string;
  invitee_user_id: number | null;
  invited_by_user_id: number;
  role: Invitation['role'];
  /** The status as the API reports it (see `invitation-status.ts`). */
  status: Invitation['status'];
  email_status: Invitation['email_status'];
  email_sent_at: string | null;
  email_last_error: string | null;
  created_at: string;
  expires_at: string;
  responded_at: string | null;
}

/**
 * Invitations as views: the delivery is the latest email's status, and the last time any of its
 * emails went out. Plain rows, times read as UTC text (`utcTextSql`): an organization lists thousands.
 */
function views(db: Db) {
  return db('invitations as i')
    .join('organizations as o', 'o.id', 'i.organization_id')
    // One read of the invitation's emails: the latest one's delivery, and when any of them last went out.
    .joinRaw(
      `left join lateral (select status, last_error, max(sent_at) over () as sent_at from emails where invitation_id = i.id order by id desc limit 1) latest on true`,
    )
    .select(
      'i.id',
      'i.organization_id',
      'o.name as organization_name',
      'i.invitee_email',
      'i.invitee_user_id',
      'i.invited_by_user_id',
      'i.role',
      db.raw(`${statusSql('i')} as status`),
      db.raw(`coalesce(latest.status, 'queued') as email_status`),
      db.raw(utcTextSql('latest.sent_at', 'email_sent_at')),
      'latest.last_error as email_last_error',
      db.raw(utcTextSql('i.created_at', 'created_at')),
      db.raw(utcTextSql('i.expires_at', 'expires_at')),
      db.raw(utcTextSql('i.responded_at', 'responded_at')),
    );
}

/** The times of a view, read as UTC text and written as the API writes them (`isoTimes`). */
const VIEW_TIMES = ['email_sent_at', 'created_at', 'expires_at', 'responded_at'] as const satisfies ReadonlyArray<keyof InvitationView>;

const NEWEST_FIRST = [
  { column: 'i.created_at', order: 'desc' },
  { column: 'i.id', order: 'desc' },
] as const;

export async function findInvitationView(db: Db, invitationId: number): Promise<InvitationView | undefined> {
  const row: InvitationView | undefined = await views(db).where('i.id', invitationId).first();
  return row && isoTimes([row], VIEW_TIMES)[0];
}

export async function findInvitationViewByToken(db: Db, tokenHash: string): Promise<InvitationView | undefined> {
  const row: InvitationView | undefined = await views(db).where('i.token_hash', tokenHash).first();
  return row && isoTimes([row], VIEW_TIMES)[0];
}

/** The organization's invitations, newest first. */
export async function listInvitationsOf(db: Db, organizationId: number): Promise<InvitationView[]> {
  return isoTimes(await views(db).where('i.organization_id', organizationId).orderBy([...NEWEST_FIRST]), VIEW_TIMES);
}

/** The invitations to this email that can be answered now, newest first. */
export async function listOpenInvitationsTo(db: Db, email: string): Promise<InvitationView[]> {
  return isoTimes(await views(db).where('i.invitee_email', email).whereRaw(openSql('i')).orderBy([...NEWEST_FIRST]), VIEW_TIMES);
}

type Lookup = { id: number; organizationId?: number } | { tokenHash: string };

/** The stored invitation by id (within an organization when given) or by token hash; locked when asked. */
export async function findInvitation(db: Db, lookup: Lookup, options: { forUpdate?: boolean } = {}): Promise<InvitationRow | undefined> {
  const query = InvitationRow.query(db);
  if ('tokenHash' in lookup) query.where({ token_hash: lookup.tokenHash });
  else query.where({ id: lookup.id, ...(lookup.organizationId === undefined ? {} : { organization_id: lookup.organizationId }) });
  return options.forUpdate ? query.forUpdate().first() : query.first();
}

/** Fails on `invitations_one_pending` when the email has a pending invitation to the organization. */
export async function insertInvitation(
  db: Db,
  invitation: Pick<InvitationRow, 'organization_id' | 'invitee_email' | 'invitee_user_id' | 'invited_by_user_id' | 'role' | 'token_hash' | 'expires_at'>,
): Promise<number> {
  const { id } = await InvitationRow.query(db).insert(invitation);
  return id;
}

/** A new token and expiry; the invitation is pending again (fails on `invitations_one_pending` like an insert). */
export async function reissueInvitation(db: Db, invitationId: number, renewal: Pick<InvitationRow, 'token_hash' | 'expires_at'>): Promise<void> {
  await InvitationRow.query(db).findById(invitationId).patch({ ...renewal, status: 'pending' });
}

export async function revokeInvitation(db: Db, invitationId: number): Promise<void> {
  await InvitationRow.query(db).findById(invitationId).patch({ status: 'revoked' });
}

/** Revokes the invitations to the organization the user sent that are still pending (lapsed or not); how many. */
export async function revokePendingInvitationsBy(db: Db, organizationId: number, userId: number): Promise<number> {
  return InvitationRow.query(db).where({ organization_id: organizationId, invited_by_user_id: userId, status: 'pending' }).patch({ status: 'revoked' });
}

/** Records the invitee's answer; an accepted invitation names the user who joined. */
export async function recordAnswer(db: Db, invitationId: number, answer: { status: 'accepted'; userId: number } | { status: 'rejected' }): Promise<void> {
  await InvitationRow.query(db)
    .findById(invitationId)
    .patch({ status: answer.status, responded_at: db.fn.now(), ...(answer.status === 'accepted' ? { invitee_user_id: answer.userId } : {}) });
}

/** Records as `expired` the pending invitations past their expiry (of one organization and email, when given); how many. */
export async function expireLapsed(db: Db, of: { organizationId: number; email: string } | 'all'): Promise<number> {
  const query = InvitationRow.query(db).whereRaw(lapsedSql(InvitationRow.tableName));
  if (of !== 'all') query.where({ organization_id: of.organizationId, invitee_email: of.email });
  return query.patch({ status: 'expired' });
}

export function toInvitation(row: InvitationView): Invitation {
  return {
    id: row.id,
    organization_id: row.organization_id,
    organization_name: row.organization_name,
    invitee_email: row.invitee_email,
    invitee_user_id: row.invitee_user_id,
    invited_by_user_id: row.invited_by_user_id,
    role: row.role,
    status: row.status,
    email_status: row.email_status,
    email_last_error: row.email_last_error,
    email_sent_at: row.email_sent_at,
    created_at: row.created_at,
    expires_at: row.expires_at,
    responded_at: row.responded_at,
  };
}
