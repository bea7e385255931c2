import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PASSWORD, registeredUser, uniqueEmail, verifiedUser } from '../factories/accounts.ts';
import { invite, type Invitation } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser, type Api } from '../helpers/browser.ts';
import { statusOf, unchecked } from '../helpers/http.ts';
import { waitUntil } from '../helpers/net.ts';
import { expireInvitation } from '../helpers/time-travel.ts';

let app: TestApp;
beforeAll(async () => {
  app = await startTestApp({ WEB_APP_URL: 'https://app.example.com' }, { workers: true });
});
afterAll(() => app.close());

const anonymous = () => new Browser(app.url).api;
const preview = (token: string) => anonymous().GET('/v1/invitations/by-token/{token}', { params: { path: { token } } });
const byToken = (api: Api, token: string, answer: 'accept' | 'reject') =>
  answer === 'accept'
    ? api.POST('/v1/invitations/by-token/{token}/accept', { params: { path: { token } } })
    : api.POST('/v1/invitations/by-token/{token}/reject', { params: { path: { token } } });
const byId = (api: Api, invitationId: number, answer: 'accept' | 'reject') =>
  answer === 'accept'
    ? api.POST('/v1/invitations/{invitation_id}/accept', { params: { path: { invitation_id: invitationId } } })
    : api.POST('/v1/invitations/{invitation_id}/reject', { params: { path: { invitation_id: invitationId } } });
const registerWith = (token: string, password = PASSWORD) => anonymous().POST('/v1/invitations/register', { body: { token, password } });
const resend = (api: Api, invitationId: number) =>
  api.POST('/v1/organization/invitations/{invitation_id}/resend', { params: { path: { invitation_id: invitationId } } });

async function invitationOf(inviter: { api: Api }, id: number): Promise<Invitation> {
  const { data: list = [] } = await inviter.api.GET('/v1/organization/invitations');
  const found = list.find((invitation) => invitation.id === id);
  if (!found) throw new Error(`invitation ${id} not listed`);
  return found;
}

describe('an invitation from start to finish', () => {
  it('is emailed, previewed without sign-in, used to register, and shows as accepted', async () => {
    const owner = await registeredUser(app, { organization: 'Babbage & Co' });
    const email = uniqueEmail('grace');
    const created = await owner.api.POST('/v1/organization/invitations', { body: { email: email.toUpperCase(), role: 'admin' } });
    expect(created.response.status).toBe(201);
    const invitation = created.data as Invitation;
    expect(invitation).toMatchObject({ status: 'pending', role: 'admin', invitee_email: email, invitee_user_id: null, responded_at: null });
    expect(new Date(invitation.expires_at).getTime() - Date.now()).toBeGreaterThan(6.9 * 86_400_000);

    const message = await app.inbox.next(email);
    expect(message.subject).toContain('Babbage & Co');
    const token = /https:\/\/app\.example\.com\/invitations\/([a-z2-7]+)/.exec(message.text)?.[1] ?? '';
    expect(token).not.toBe('');

    const previewed = await preview(token);
    expect(previewed.response.status).toBe(200);
    expect(previewed.data).toEqual({
      organization_name: 'Babbage & Co',
      invitee_email: email,
      role: 'admin',
      status: 'pending',
      expires_at: invitation.expires_at,
    });

    const invitee = new Browser(app.url);
    const registered = await invitee.api.POST('/v1/invitations/register', { body: { token, password: PASSWORD, first_name: 'Grace', last_name: 'Hopper' } });
    expect(registered.response.status).toBe(201);
    expect(registered.data).toMatchObject({
      authenticated: true,
      user: { email, name: 'Grace Hopper', organization: 'Babbage & Co', role: { name: 'admin' }, requires_profile_completion: false },
      session: { auth_method: 'password' },
    });

    const { data: members } = await owner.api.GET('/v1/organization/members');
    expect(members).toContainEqual(expect.objectContaining({ email, role: 'admin' }));
    // No organization of their own was created.
    expect(await app.db('memberships as m').join('users as u', 'u.id', 'm.user_id').where('u.email', email).count({ n: '*' })).toEqual([{ n: '1' }]);

    await waitUntil(async () => (await invitationOf(owner, invitation.id)).email_status === 'sent', 'the email to be recorded as sent');
    const seen = await invitationOf(owner, invitation.id);
    expect(seen).toMatchObject({ status: 'accepted', invitee_user_id: expect.any(Number), email_status: 'sent', email_last_error: null });
    expect(seen.responded_at).not.toBeNull();
    expect(seen.email_sent_at).not.toBeNull();
  });
});

describe('creating invitations', () => {
  it('defaults the role to member and knows an invitee who already has an account', async () => {
    const owner = await registeredUser(app);
    const existing = await registeredUser(app);
    const { data } = await owner.api.POST('/v1/organization/invitations', { body: { email: existing.email } });
    expect(data).toMatchObject({ role: 'member', invitee_user_id: existing.user.id, email_status: 'queued', email_sent_at: null });
  });

  it('refuses a second pending invitation for the same email with 409 INVITATION_ALREADY_PENDING', async () => {
    const owner = await registeredUser(app);
    const email = uniqueEmail();
    await invite(app, owner, email);
    const again = await owner.api.POST('/v1/organization/invitations', { body: { email: email.toUpperCase() } });
    expect(again.response.status).toBe(409);
    expect(again.error?.code).toBe('INVITATION_ALREADY_PENDING');
  });

  it('refuses to invite a member with 409 ALREADY_A_MEMBER', async () => {
    const owner = await registeredUser(app);
    const { error, response } = await owner.api.POST('/v1/organization/invitations', { body: { email: owner.email } });
    expect(response.status).toBe(409);
    expect(error?.code).toBe('ALREADY_A_MEMBER');
  });

  it.each([[{ email: 'a@' }], [{ email: 'x@y' + 'z'.repeat(320) }], [{ email: 'ok@example.com', role: 'super_admin' }], [{ email: 'ok@example.com', extra: 1 }]])(
    'refuses %o with 422',
    async (body) => {
      const owner = await registeredUser(app);
      expect(await statusOf(owner.api.POST('/v1/organization/invitations', { body: unchecked(body) }))).toBe(422);
    },
  );
});

describe('answering an invitation', () => {
  it('lets a signed-in invitee list, accept by token, and switches the session to that organization', async () => {
    const owner = await registeredUser(app, { organization: 'Inviting Org' });
    const invitee = await verifiedUser(app, { organization: 'Own Org' });
    const { token, invitation } = await invite(app, owner, invitee.email, 'viewer');

    const { data: mine = [] } = await invitee.api.GET('/v1/invitations');
    expect(mine.map((i) => i.id)).toEqual([invitation.id]);

    const accepted = await byToken(invitee.api, token, 'accept');
    expect(accepted.response.status).toBe(200);
    expect(accepted.data).toMatchObject({ status: 'accepted', invitee_user_id: invitee.user.id });
    expect((await invitee.api.GET('/v1/auth/session')).data).toMatchObject({ user: { organization: 'Inviting Org', role: { name: 'viewer' } } });
    expect((await invitee.api.GET('/v1/invitations')).data).toEqual([]);
  });

  it('accepts by id for an invitee whose email is verified', async () => {
    const owner = await registeredUser(app);
    const invitee = await verifiedUser(app);
    const { invitation } = await invite(app, owner, invitee.email);
    const accepted = await byId(invitee.api, invitation.id, 'accept');
    expect(accepted.response.status).toBe(200);
    expect(accepted.data).toMatchObject({ status: 'accepted' });
  });

  it('declines by token and by id without joining', async () => {
    const owner = await registeredUser(app);
    const invitee = await verifiedUser(app);
    const first = await invite(app, owner, invitee.email);
    const rejected = await byToken(invitee.api, first.token, 'reject');
    expect(rejected.response.status).toBe(200);
    expect(rejected.data).toMatchObject({ status: 'rejected', responded_at: expect.any(String) });

    const second = await invite(app, owner, invitee.email);
    expect((await byId(invitee.api, second.invitation.id, 'reject')).data).toMatchObject({ status: 'rejected' });
    const { data: members = [] } = await owner.api.GET('/v1/organization/members');
    expect(members.map((m) => m.email)).not.toContain(invitee.email);
  });

  it('refuses a user signed in with another email: 403 by token, 404 by id', async () => {
    const owner = await registeredUser(app);
    const stranger = await verifiedUser(app);
    const { token, invitation } = await invite(app, owner, uniqueEmail('someone-else'));
    const tokenAnswer = await byToken(stranger.api, token, 'accept');
    expect(tokenAnswer.response.status).toBe(403);
    expect(tokenAnswer.error?.code).toBe('INVITATION_EMAIL_MISMATCH');
    const idAnswer = await byId(stranger.api, invitation.id, 'accept');
    expect(idAnswer.response.status).toBe(404);
    expect(idAnswer.error?.code).toBe('INVITATION_NOT_FOUND');
  });

  it('refuses a used token: 409 INVITATION_NOT_PENDING to accept, reject or register', async () => {
    const owner = await registeredUser(app);
    const email = uniqueEmail();
    const { token } = await invite(app, owner, email);
    const invitee = new Browser(app.url);
    expect(await statusOf(invitee.api.POST('/v1/invitations/register', { body: { token, password: PASSWORD } }))).toBe(201);
    for (const { response, error } of [await byToken(invitee.api, token, 'accept'), await byToken(invitee.api, token, 'reject'), await registerWith(token)]) {
      expect(response.status).toBe(409);
      expect(error?.code).toBe('INVITATION_NOT_PENDING');
    }
  });

  it('refuses to register with a common password or the invitee email with 422 at body/password, leaving the invitation pending', async () => {
    const owner = await registeredUser(app);
    const email = uniqueEmail('careless');
    const { token, invitation } = await invite(app, owner, email);
    for (const password of ['iloveyou', email, email.split('@')[0] ?? '']) {
      const { error, response } = await registerWith(token, password);
      expect(response.status).toBe(422);
      expect(error?.errors?.map((e) => e.location)).toEqual(['body/password']);
    }
    expect((await invitationOf(owner, invitation.id)).status).toBe('pending');
    // The token is looked up first: an unknown one answers 404 whatever the password.
    expect(await statusOf(registerWith('nosuchtoken', 'iloveyou'))).toBe(404);
  });

  it('refuses to register an email that already has an account with 409 EMAIL_TAKEN', async () => {
    const owner = await registeredUser(app);
    const existing = await registeredUser(app);
    const { token } = await invite(app, owner, existing.email);
    const { error, response } = await registerWith(token);
    expect(response.status).toBe(409);
    expect(error?.code).toBe('EMAIL_TAKEN');
  });

  it('answers an unknown token with 404 INVITATION_NOT_FOUND', async () => {
    const { error, response } = await preview('nosuchtoken');
    expect(response.status).toBe(404);
    expect(error?.code).toBe('INVITATION_NOT_FOUND');
  });
});

describe('expiry', () => {
  it('shows an invitation past its expiry as expired and refuses it with 410', async () => {
    const owner = await registeredUser(app);
    const invitee = await verifiedUser(app);
    const { token, invitation } = await invite(app, owner, invitee.email);
    await expireInvitation(app, { id: invitation.id });

    expect((await preview(token)).data).toMatchObject({ status: 'expired' });
    const accepted = await byToken(invitee.api, token, 'accept');
    expect(accepted.response.status).toBe(410);
    expect(accepted.error?.code).toBe('INVITATION_EXPIRED');
    expect((await invitee.api.GET('/v1/invitations')).data).toEqual([]);
    expect((await invitationOf(owner, invitation.id)).status).toBe('expired');
  });

  it('is recorded by the scheduled job', async () => {
    const owner = await registeredUser(app);
    const { invitation } = await invite(app, owner, uniqueEmail());
    await expireInvitation(app, { id: invitation.id });
    await app.container.boss.send('expire-invitations', {});
    // The stored status, not the status read at request time (which is `expired` from the first second).
    await waitUntil(async () => (await app.db('invitations').where({ id: invitation.id }).first()).status === 'expired', 'the expiry job');
  });
});

describe('resending', () => {
  it('issues a new token and expiry, emails again, and the old link stops working', async () => {
    const owner = await registeredUser(app);
    const email = uniqueEmail();
    const { token: oldToken, invitation } = await invite(app, owner, email);
    await expireInvitation(app, { id: invitation.id });

    const resent = await resend(owner.api, invitation.id);
    expect(resent.response.status).toBe(200);
    expect(resent.data).toMatchObject({ id: invitation.id, status: 'pending', email_status: 'queued', email_last_error: null });
    expect(new Date(resent.data?.expires_at ?? 0).getTime()).toBeGreaterThan(Date.now() + 6.9 * 86_400_000);

    const message = await app.inbox.next(email);
    const newToken = /\/invitations\/([a-z2-7]+)/.exec(message.text)?.[1];
    expect(newToken).toBeDefined();
    expect(newToken).not.toBe(oldToken);
    expect(await statusOf(preview(oldToken))).toBe(404);
    expect((await preview(newToken ?? '')).data).toMatchObject({ status: 'pending' });
  });

  it('refuses an accepted invitation with 409 and an unknown one with 404', async () => {
    const owner = await registeredUser(app);
    const invitee = await verifiedUser(app);
    const { invitation } = await invite(app, owner, invitee.email);
    expect(await statusOf(byId(invitee.api, invitation.id, 'accept'))).toBe(200);
    expect((await resend(owner.api, invitation.id)).error?.code).toBe('INVITATION_NOT_PENDING');
    expect(await statusOf(resend(owner.api, 999999))).toBe(404);
  });

  it('lets only a super_admin resend an admin invitation', async () => {
    const owner = await registeredUser(app);
    const adminEmail = uniqueEmail('admin');
    const { token } = await invite(app, owner, adminEmail, 'admin');
    const admin = new Browser(app.url);
    await admin.api.POST('/v1/invitations/register', { body: { token, password: PASSWORD } });
    const { invitation } = await invite(app, owner, uniqueEmail('other-admin'), 'admin');
    expect(await statusOf(resend(admin.api, invitation.id))).toBe(403);
  });
});

describe('delivery status', () => {
  it('tells the truth when the email cannot be sent', async () => {
    const failing = await startTestApp({ EMAIL_RETRY_LIMIT: '0' }, { workers: true });
    try {
      failing.inbox.refuse = true;
      const owner = await registeredUser(failing);
      const { data: created } = await owner.api.POST('/v1/organization/invitations', { body: { email: uniqueEmail() } });
      const id = created?.id ?? 0;
      await waitUntil(async () => (await invitationOf(owner, id)).email_status === 'failed', 'the email to fail');
      expect(await invitationOf(owner, id)).toMatchObject({
        email_status: 'failed',
        email_sent_at: null,
        email_last_error: expect.stringContaining('Mailbox unavailable'),
      });
    } finally {
      await failing.close();
    }
  });
});

describe('the organization’s list', () => {
  it('follows the organization’s name and a revocation once it is kept (LIST_CACHE_MIN_ITEMS=0 in test)', async () => {
    const owner = await registeredUser(app, { organization: 'Before Ltd' });
    const { invitation } = await invite(app, owner, uniqueEmail('kept'));
    // The first read marks the organization's list, the second keeps it, the third reuses it.
    for (let i = 0; i < 3; i++) expect(await invitationOf(owner, invitation.id)).toMatchObject({ organization_name: 'Before Ltd', status: 'pending' });
    expect((await owner.api.PATCH('/v1/organization', { body: { name: 'After Ltd' } })).response.status).toBe(200);
    expect(await invitationOf(owner, invitation.id)).toMatchObject({ organization_name: 'After Ltd', status: 'pending' });
    // Straight to the database, as another process would.
    await app.db('invitations').where({ id: invitation.id }).update({ status: 'revoked' });
    expect(await invitationOf(owner, invitation.id)).toMatchObject({ organization_name: 'After Ltd', status: 'revoked' });
  });
});
