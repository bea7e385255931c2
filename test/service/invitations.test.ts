import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { markEmailVerified } from '../../src/accounts/accounts.repository.ts';
import type { SessionPrincipal } from '../../src/principal.ts';
import type { InvitationStatus } from '../../src/db/models/invitations.ts';
import { lapsedSql, openSql, statusAt, statusSql } from '../../src/invitations/invitation-status.ts';
import { uniqueEmail } from '../factories/accounts.ts';
import { startServices, type Services } from '../helpers/services.ts';
import { expireInvitation } from '../helpers/time-travel.ts';

/**
 * Invitation expiry as the invitations service keeps it: the scheduled job's sweep, and a lapsed
 * invitation that must stop blocking a new one. Time passes by moving stored expiries back.
 */
let services: Services;
let owner: SessionPrincipal;
beforeAll(async () => {
  services = await startServices();
  owner = await services.owner();
});
afterAll(() => services.close());

const invitations = () => services.container.invitations;
const storedStatus = async (id: number) => (await services.db('invitations').where({ id }).first('status')).status as InvitationStatus;

/** A user of another organization who proved their email, as a principal. */
async function verifiedInvitee(email: string): Promise<SessionPrincipal> {
  const principal = await services.owner({ email });
  await markEmailVerified(services.db, principal.user.id);
  const reloaded = await services.container.sessions.load(principal.sessionId);
  if (!reloaded) throw new Error('no session');
  return reloaded;
}

describe('invitation expiry', () => {
  it('records as expired only the pending invitations past their expiry, and counts them', async () => {
    const overdue = await invitations().create(owner, { email: uniqueEmail('overdue') });
    const current = await invitations().create(owner, { email: uniqueEmail('current') });
    const revoked = await invitations().create(owner, { email: uniqueEmail('revoked') });
    await invitations().revoke(owner, revoked.id);
    const acceptedEmail = uniqueEmail('accepted');
    const accepted = await invitations().create(owner, { email: acceptedEmail });
    await invitations().respondById(await verifiedInvitee(acceptedEmail), accepted.id, 'accept');
    for (const { id } of [overdue, revoked, accepted]) await expireInvitation(services, { id });

    expect(await invitations().expireOverdue()).toBe(1);
    expect(await storedStatus(overdue.id)).toBe('expired');
    expect(await storedStatus(current.id)).toBe('pending');
    expect(await storedStatus(revoked.id)).toBe('revoked');
    expect(await storedStatus(accepted.id)).toBe('accepted');
    expect(await invitations().expireOverdue()).toBe(0);
  });

  it('lets a lapsed invitation, not yet swept, give way to a new one for the same email', async () => {
    const email = uniqueEmail('again');
    const lapsed = await invitations().create(owner, { email });
    await expect(invitations().create(owner, { email })).rejects.toMatchObject({ code: 'INVITATION_ALREADY_PENDING' });
    await expireInvitation(services, { id: lapsed.id });
    const fresh = await invitations().create(owner, { email });
    expect(fresh).toMatchObject({ status: 'pending', invitee_email: email });
    expect(await storedStatus(lapsed.id)).toBe('expired');
  });

  it('reads every stored status and expiry in SQL as the TypeScript rule does', async () => {
    const statuses: InvitationStatus[] = ['pending', 'accepted', 'rejected', 'expired', 'revoked'];
    const offsets = ['-1 day', '-1 second', '0 seconds', '1 second', '1 day'];
    const { rows } = await services.db.raw<{ rows: Array<{ stored: InvitationStatus; expires_at: Date; now: Date; status: InvitationStatus; open: boolean; lapsed: boolean }> }>(
      `select i.status as stored, i.expires_at, now() as now, ${statusSql('i')} as status, ${openSql('i')} as open, ${lapsedSql('i')} as lapsed
       from unnest(?::text[]) as s(status) cross join unnest(?::interval[]) as o(offset_by)
       cross join lateral (select s.status, now() + o.offset_by as expires_at) as i`,
      [statuses, offsets],
    );
    expect(rows).toHaveLength(statuses.length * offsets.length);
    for (const row of rows) {
      const expected = statusAt({ status: row.stored, expires_at: row.expires_at }, row.now);
      expect(row.status, `${row.stored} expiring at ${row.expires_at.toISOString()}`).toBe(expected);
      expect(row.open).toBe(expected === 'pending');
      expect(row.lapsed).toBe(row.stored === 'pending' && expected === 'expired');
    }
  });
});
