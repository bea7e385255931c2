import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';

export type Invitation = components['schemas']['Invitation'];

export interface InvitationRow {
  id: number;
  organization_id: number;
  organization_name: string;
  invitee_email: string;
  invitee_user_id: number | null;
  invited_by_user_id: number;
  role: Invitation['role'];
  /** The status as the API reports it: a pending invitation past its expiry is `expired`. */
  status: Invitation['status'];
  email_status: Invitation['email_status'];
  email_sent_at: Date | null;
  email_last_error: string | null;
  created_at: Date;
  expires_at: Date;
  responded_at: Date | null;
}

/**
 * Invitations with what the API shows of them: the organization's name, the status as of now, and
 * the delivery of the latest email (the last time any of its emails went out).
 */
export function invitationsQuery(db: Knex | Knex.Transaction): Knex.QueryBuilder {
  return db('invitations as i')
    .join('organizations as o', 'o.id', 'i.organization_id')
    .joinRaw(
      `left join lateral (select status, last_error from emails where invitation_id = i.id order by id desc limit 1) latest on true`,
    )
    .select(
      'i.id',
      'i.organization_id',
      'o.name as organization_name',
      'i.invitee_email',
      'i.invitee_user_id',
      'i.invited_by_user_id',
      'i.role',
      db.raw(`case when i.status = 'pending' and i.expires_at <= now() then 'expired' else i.status end as status`),
      db.raw(`coalesce(latest.status, 'queued') as email_status`),
      db.raw(`(select max(sent_at) from emails where invitation_id = i.id) as email_sent_at`),
      'latest.last_error as email_last_error',
      'i.created_at',
      'i.expires_at',
      'i.responded_at',
    );
}

export function toInvitation(row: InvitationRow): Invitation {
  return {
    ...row,
    email_sent_at: row.email_sent_at?.toISOString() ?? null,
    created_at: row.created_at.toISOString(),
    expires_at: row.expires_at.toISOString(),
    responded_at: row.responded_at?.toISOString() ?? null,
  };
}
