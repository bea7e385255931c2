import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { InvitationStatus } from '../../src/db/models/invitations.ts';
import { lapsedSql, openSql, statusAt, statusSql } from '../../src/invitations/invitation-status.ts';
import { PASSWORD, registeredUser, uniqueEmail, verifiedUser } from '../factories/accounts.ts';
import { invite } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser } from '../helpers/browser.ts';
import { jsonOf, type Problem } from '../helpers/http.ts';
import { waitUntil } from '../helpers/net.ts';

let app: TestApp;
beforeAll(async () => {
  app = await startTestApp({ WEB_APP_URL: 'https://app.example.com' }, { workers: true });
});
afterAll(() => app.close());

interface Invitation {
  id: number;
  status: string;
  role: string;
  invitee_email: string;
  invitee_user_id: number | null;
  email_status: string;
  email_sent_at: string | null;
  email_last_error: string | null;
  expires_at: string;
  responded_at: string | null;
}

const codeOf = async (response: Response) => (await jsonOf<Problem>(response)).code;

async function invitationOf(inviter: Browser, id: number): Promise<Invitation> {
  const list = await jsonOf<Invitation[]>(await inviter.get('/v1/organization/invitations'));
  const found = list.find((invitation) => invitation.id === id);
  if (!found) throw new Error(`invitation ${id} not listed`);
  return found;
}

describe('an invitation from start to finish', () => {
  it('is emailed, previewed without sign-in, used to register, and shows as accepted', async () => {
    const owner = await registeredUser(app, { organization: 'Babbage & Co' });
    const email = uniqueEmail('grace');
    const created = await owner.browser.post('/v1/organization/invitations', { email: email.toUpperCase(), role: 'admin' });
    expect(created.status).toBe(201);
    const invitation = await jsonOf<Invitation>(created);
    expect(invitation).toMatchObject({ status: 'pending', role: 'admin', invitee_email: email, invitee_user_id: null, responded_at: null });
    expect(new Date(invitation.expires_at).getTime() - Date.now()).toBeGreaterThan(6.9 * 86_400_000);

    const message = await app.inbox.next(email);
    expect(message.subject).toContain('Babbage & Co');
    const token = /https:\/\/app\.example\.com\/invitations\/([a-z2-7]+)/.exec(message.text)?.[1] ?? '';
    expect(token).not.toBe('');

    const preview = await fetch(`${app.url}/v1/invitations/by-token/${token}`);
    expect(preview.status).toBe(200);
    expect(await jsonOf(preview)).toEqual({
      organization_name: 'Babbage & Co',
      invitee_email: email,
      role: 'admin',
      status: 'pending',
      expires_at: invitation.expires_at,
    });

    const invitee = new Browser(app.url);
    const registered = await invitee.post('/v1/invitations/register', { token, password: PASSWORD, first_name: 'Grace', last_name: 'Hopper' });
    expect(registered.status).toBe(201);
    expect(await jsonOf(registered)).toMatchObject({
      authenticated: true,
      user: { email, name: 'Grace Hopper', organization: 'Babbage & Co', role: { name: 'admin' }, requires_profile_completion: false },
      session: { auth_method: 'password' },
    });

    const members = await jsonOf<Array<{ email: string; role: string }>>(await owner.browser.get('/v1/organization/members'));
    expect(members).toContainEqual(expect.objectContaining({ email, role: 'admin' }));
    // No organization of their own was created.
    expect(await app.db('memberships as m').join('users as u', 'u.id', 'm.user_id').where('u.email', email).count({ n: '*' })).toEqual([{ n: '1' }]);

    await waitUntil(async () => (await invitationOf(owner.browser, invitation.id)).email_status === 'sent', 'the email to be recorded as sent');
    const seen = await invitationOf(owner.browser, invitation.id);
    expect(seen).toMatchObject({ status: 'accepted', invitee_user_id: expect.any(Number), email_status: 'sent', email_last_error: null });
    expect(seen.responded_at).not.toBeNull();
    expect(seen.email_sent_at).not.toBeNull();
  });
});

describe('creating invitations', () => {
  it('defaults the role to member and knows an invitee who already has an account', async () => {
    const owner = await registeredUser(app);
    const existing = await registeredUser(app);
    const response = await owner.browser.post('/v1/organization/invitations', { email: existing.email });
    expect(await jsonOf(response)).toMatchObject({ role: 'member', invitee_user_id: existing.user.id, email_status: 'queued', email_sent_at: null });
  });

  it('refuses a second pending invitation for the same email with 409 INVITATION_ALREADY_PENDING', async () => {
    const owner = await registeredUser(app);
    const email = uniqueEmail();
    await invite(app, owner.browser, email);
    const again = await owner.browser.post('/v1/organization/invitations', { email: email.toUpperCase() });
    expect(again.status).toBe(409);
    expect(await codeOf(again)).toBe('INVITATION_ALREADY_PENDING');
  });

  it('refuses to invite a member with 409 ALREADY_A_MEMBER', async () => {
    const owner = await registeredUser(app);
    const response = await owner.browser.post('/v1/organization/invitations', { email: owner.email });
    expect(response.status).toBe(409);
    expect(await codeOf(response)).toBe('ALREADY_A_MEMBER');
  });

  it.each([[{ email: 'a@' }], [{ email: 'x@y' + 'z'.repeat(320) }], [{ email: 'ok@example.com', role: 'super_admin' }], [{ email: 'ok@example.com', extra: 1 }]])(
    'refuses %o with 422',
    async (body) => {
      const owner = await registeredUser(app);
      expect((await owner.browser.post('/v1/organization/invitations', body)).status).toBe(422);
    },
  );
});

describe('answering an invitation', () => {
  it('lets a signed-in invitee list, accept by token, and switches the session to that organization', async () => {
    const owner = await registeredUser(app, { organization: 'Inviting Org' });
    const invitee = await verifiedUser(app, { organization: 'Own Org' });
    const { token, invitation } = await invite(app, owner.browser, invitee.email, 'viewer');

    const mine = await jsonOf<Invitation[]>(await invitee.browser.get('/v1/invitations'));
    expect(mine.map((i) => i.id)).toEqual([invitation.id]);

    const accepted = await invitee.browser.post(`/v1/invitations/by-token/${token}/accept`);
    expect(accepted.status).toBe(200);
    expect(await jsonOf(accepted)).toMatchObject({ status: 'accepted', invitee_user_id: invitee.user.id });
    expect(await jsonOf(await invitee.browser.get('/v1/auth/session'))).toMatchObject({ user: { organization: 'Inviting Org', role: { name: 'viewer' } } });
    expect(await jsonOf<Invitation[]>(await invitee.browser.get('/v1/invitations'))).toEqual([]);
  });

  it('accepts by id for an invitee whose email is verified', async () => {
    const owner = await registeredUser(app);
    const invitee = await verifiedUser(app);
    const { invitation } = await invite(app, owner.browser, invitee.email);
    const accepted = await invitee.browser.post(`/v1/invitations/${invitation.id}/accept`);
    expect(accepted.status).toBe(200);
    expect(await jsonOf(accepted)).toMatchObject({ status: 'accepted' });
  });

  it('declines by token and by id without joining', async () => {
    const owner = await registeredUser(app);
    const invitee = await verifiedUser(app);
    const first = await invite(app, owner.browser, invitee.email);
    const rejected = await invitee.browser.post(`/v1/invitations/by-token/${first.token}/reject`);
    expect(rejected.status).toBe(200);
    expect(await jsonOf(rejected)).toMatchObject({ status: 'rejected', responded_at: expect.any(String) });

    const second = await invite(app, owner.browser, invitee.email);
    expect(await jsonOf(await invitee.browser.post(`/v1/invitations/${second.invitation.id}/reject`))).toMatchObject({ status: 'rejected' });
    const members = await jsonOf<Array<{ email: string }>>(await owner.browser.get('/v1/organization/members'));
    expect(members.map((m) => m.email)).not.toContain(invitee.email);
  });

  it('refuses a user signed in with another email: 403 by token, 404 by id', async () => {
    const owner = await registeredUser(app);
    const stranger = await verifiedUser(app);
    const { token, invitation } = await invite(app, owner.browser, uniqueEmail('someone-else'));
    const byToken = await stranger.browser.post(`/v1/invitations/by-token/${token}/accept`);
    expect(byToken.status).toBe(403);
    expect(await codeOf(byToken)).toBe('INVITATION_EMAIL_MISMATCH');
    const byId = await stranger.browser.post(`/v1/invitations/${invitation.id}/accept`);
    expect(byId.status).toBe(404);
    expect(await codeOf(byId)).toBe('INVITATION_NOT_FOUND');
  });

  it('refuses a used token: 409 INVITATION_NOT_PENDING to accept, reject or register', async () => {
    const owner = await registeredUser(app);
    const email = uniqueEmail();
    const { token } = await invite(app, owner.browser, email);
    const invitee = new Browser(app.url);
    expect((await invitee.post('/v1/invitations/register', { token, password: PASSWORD })).status).toBe(201);
    for (const response of [
      await invitee.post(`/v1/invitations/by-token/${token}/accept`),
      await invitee.post(`/v1/invitations/by-token/${token}/reject`),
      await new Browser(app.url).post('/v1/invitations/register', { token, password: PASSWORD }),
    ]) {
      expect(response.status).toBe(409);
      expect(await codeOf(response)).toBe('INVITATION_NOT_PENDING');
    }
  });

  it('refuses to register with a common password or the invitee email with 422 at body/password, leaving the invitation pending', async () => {
    const owner = await registeredUser(app);
    const email = uniqueEmail('careless');
    const { token, invitation } = await invite(app, owner.browser, email);
    for (const password of ['iloveyou', email, email.split('@')[0] ?? '']) {
      const response = await new Browser(app.url).post('/v1/invitations/register', { token, password });
      expect(response.status).toBe(422);
      expect((await jsonOf<Problem>(response)).errors?.map((e) => e.location)).toEqual(['body/password']);
    }
    expect((await invitationOf(owner.browser, invitation.id)).status).toBe('pending');
    // The token is looked up first: an unknown one answers 404 whatever the password.
    expect((await new Browser(app.url).post('/v1/invitations/register', { token: 'nosuchtoken', password: 'iloveyou' })).status).toBe(404);
  });

  it('refuses to register an email that already has an account with 409 EMAIL_TAKEN', async () => {
    const owner = await registeredUser(app);
    const existing = await registeredUser(app);
    const { token } = await invite(app, owner.browser, existing.email);
    const response = await new Browser(app.url).post('/v1/invitations/register', { token, password: PASSWORD });
    expect(response.status).toBe(409);
    expect(await codeOf(response)).toBe('EMAIL_TAKEN');
  });

  it('answers an unknown token with 404 INVITATION_NOT_FOUND', async () => {
    const response = await fetch(`${app.url}/v1/invitations/by-token/nosuchtoken`);
    expect(response.status).toBe(404);
    expect(await codeOf(response)).toBe('INVITATION_NOT_FOUND');
  });
});

describe('expiry', () => {
  it('shows an invitation past its expiry as expired and refuses it with 410', async () => {
    const owner = await registeredUser(app);
    const invitee = await verifiedUser(app);
    const { token, invitation } = await invite(app, owner.browser, invitee.email);
    await app.db('invitations').where({ id: invitation.id }).update({ expires_at: new Date(Date.now() - 1000) });

    expect(await jsonOf(await fetch(`${app.url}/v1/invitations/by-token/${token}`))).toMatchObject({ status: 'expired' });
    const accepted = await invitee.browser.post(`/v1/invitations/by-token/${token}/accept`);
    expect(accepted.status).toBe(410);
    expect(await codeOf(accepted)).toBe('INVITATION_EXPIRED');
    expect(await jsonOf(await invitee.browser.get('/v1/invitations'))).toEqual([]);
    expect((await invitationOf(owner.browser, invitation.id)).status).toBe('expired');
  });

  it('is recorded by the scheduled job', async () => {
    const owner = await registeredUser(app);
    const { invitation } = await invite(app, owner.browser, uniqueEmail());
    await app.db('invitations').where({ id: invitation.id }).update({ expires_at: new Date(Date.now() - 1000) });
    await app.container.boss.send('expire-invitations', {});
    await waitUntil(async () => (await app.db('invitations').where({ id: invitation.id }).first()).status === 'expired', 'the expiry job');
  });

  it('reads every stored status and expiry in SQL as the TypeScript rule does', async () => {
    const statuses: InvitationStatus[] = ['pending', 'accepted', 'rejected', 'expired', 'revoked'];
    const offsets = ['-1 day', '-1 second', '0 seconds', '1 second', '1 day'];
    const { rows } = await app.db.raw<{ rows: Array<{ stored: InvitationStatus; expires_at: Date; now: Date; status: InvitationStatus; open: boolean; lapsed: boolean }> }>(
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

describe('resending', () => {
  it('issues a new token and expiry, emails again, and the old link stops working', async () => {
    const owner = await registeredUser(app);
    const email = uniqueEmail();
    const { token: oldToken, invitation } = await invite(app, owner.browser, email);
    await app.db('invitations').where({ id: invitation.id }).update({ expires_at: new Date(Date.now() - 1000) });

    const resent = await owner.browser.post(`/v1/organization/invitations/${invitation.id}/resend`);
    expect(resent.status).toBe(200);
    const body = await jsonOf<Invitation>(resent);
    expect(body).toMatchObject({ id: invitation.id, status: 'pending', email_status: 'queued', email_last_error: null });
    expect(new Date(body.expires_at).getTime()).toBeGreaterThan(Date.now() + 6.9 * 86_400_000);

    const message = await app.inbox.next(email);
    const newToken = /\/invitations\/([a-z2-7]+)/.exec(message.text)?.[1];
    expect(newToken).toBeDefined();
    expect(newToken).not.toBe(oldToken);
    expect((await fetch(`${app.url}/v1/invitations/by-token/${oldToken}`)).status).toBe(404);
    expect(await jsonOf(await fetch(`${app.url}/v1/invitations/by-token/${newToken}`))).toMatchObject({ status: 'pending' });
  });

  it('refuses an accepted invitation with 409 and an unknown one with 404', async () => {
    const owner = await registeredUser(app);
    const invitee = await verifiedUser(app);
    const { invitation } = await invite(app, owner.browser, invitee.email);
    expect((await invitee.browser.post(`/v1/invitations/${invitation.id}/accept`)).status).toBe(200);
    expect(await codeOf(await owner.browser.post(`/v1/organization/invitations/${invitation.id}/resend`))).toBe('INVITATION_NOT_PENDING');
    const unknown = await owner.browser.post('/v1/organization/invitations/999999/resend');
    expect(unknown.status).toBe(404);
  });

  it('lets only a super_admin resend an admin invitation', async () => {
    const owner = await registeredUser(app);
    const adminEmail = uniqueEmail('admin');
    const { token } = await invite(app, owner.browser, adminEmail, 'admin');
    const admin = new Browser(app.url);
    await admin.post('/v1/invitations/register', { token, password: PASSWORD });
    const { invitation } = await invite(app, owner.browser, uniqueEmail('other-admin'), 'admin');
    const response = await admin.post(`/v1/organization/invitations/${invitation.id}/resend`);
    expect(response.status).toBe(403);
  });
});

describe('delivery status', () => {
  it('tells the truth when the email cannot be sent', async () => {
    const failing = await startTestApp({ EMAIL_RETRY_LIMIT: '0' }, { workers: true });
    try {
      failing.inbox.refuse = true;
      const owner = await registeredUser(failing);
      const created = await jsonOf<Invitation>(await owner.browser.post('/v1/organization/invitations', { email: uniqueEmail() }));
      await waitUntil(async () => (await invitationOf(owner.browser, created.id)).email_status === 'failed', 'the email to fail');
      expect(await invitationOf(owner.browser, created.id)).toMatchObject({
        email_status: 'failed',
        email_sent_at: null,
        email_last_error: expect.stringContaining('Mailbox unavailable'),
      });
    } finally {
      await failing.close();
    }
  });
});
