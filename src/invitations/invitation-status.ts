import type { InvitationStatus } from '../db/models/invitations.ts';
import { AppError } from '../errors.ts';

/**
 * The one rule of an invitation's status as the API reports it: a stored status that lapses into
 * another once `expires_at` has passed. A `pending` invitation past its expiry is `expired`, whether
 * or not the scheduled job has recorded it yet. The TypeScript reading (`statusAt`) and the SQL
 * reading (`statusSql`, `openSql`, `lapsedSql`) are both built from this one declaration.
 */
export const LAPSE = { from: 'pending', into: 'expired' } as const satisfies { from: InvitationStatus; into: InvitationStatus };

interface Stored {
  status: InvitationStatus;
  expires_at: Date;
}

/** The status as of `now`. */
export function statusAt(invitation: Stored, now: Date = new Date()): InvitationStatus {
  return invitation.status === LAPSE.from && invitation.expires_at.getTime() <= now.getTime() ? LAPSE.into : invitation.status;
}

/** The same rule as a SQL expression over the invitations table under `alias`, as of the transaction's `now()`. */
export function statusSql(alias: string): string {
  return `case when ${lapsedSql(alias)} then '${LAPSE.into}' else ${alias}.status end`;
}

/** A SQL condition: the invitation under `alias` reads as `pending` now. */
export function openSql(alias: string): string {
  return `${alias}.status = '${LAPSE.from}' and ${alias}.expires_at > now()`;
}

/** A SQL condition: the invitation under `alias` is stored as `pending` but reads as `expired` now. */
export function lapsedSql(alias: string): string {
  return `${alias}.status = '${LAPSE.from}' and ${alias}.expires_at <= now()`;
}

/** Refuses an invitation that cannot be answered now: 410 once it has expired, 409 once answered or revoked. */
export function assertAnswerable(invitation: Stored, now: Date = new Date()): void {
  const status = statusAt(invitation, now);
  if (status === LAPSE.into) throw new AppError('INVITATION_EXPIRED', 'This invitation has expired; ask for a new one.');
  if (status !== LAPSE.from) throw new AppError('INVITATION_NOT_PENDING', `This invitation was already ${status}.`);
}

/** Whether the organization may still resend or revoke it: nobody answered it (it may have expired). */
export function isUnanswered(invitation: Pick<Stored, 'status'>): boolean {
  return invitation.status === LAPSE.from || invitation.status === LAPSE.into;
}
