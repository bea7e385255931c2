import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken } from '../../src/crypto.ts';
import { PASSWORD, registeredUser, signedIn, SUBJECTS, uniqueEmail, unverifiedUser, verificationToken, verifiedUser } from '../factories/accounts.ts';
import { invite } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser, type Api } from '../helpers/browser.ts';
import { statusOf } from '../helpers/http.ts';
import { expireVerificationToken } from '../helpers/time-travel.ts';

let app: TestApp;
beforeAll(async () => {
  // Behind a trusted proxy, so a test can speak from a client address of its own (X-Forwarded-For).
  app = await startTestApp({ WEB_APP_URL: 'https://app.example.com', TRUST_PROXY: 'true' }, { workers: true });
});
afterAll(() => app.close());

const confirm = (token: string, browser = new Browser(app.url)) => browser.api.POST('/v1/user/email-verification/confirm', { body: { token } });
const resend = (api: Api, headers: Record<string, string> = {}) => api.POST('/v1/user/email-verification/resend', { headers });
const sessionOf = async (api: Api) => (await api.GET('/v1/auth/session')).data;
const answer = (api: Api, invitationId: number, action: 'accept' | 'reject') =>
  action === 'accept'
    ? api.POST('/v1/invitations/{invitation_id}/accept', { params: { path: { invitation_id: invitationId } } })
    : api.POST('/v1/invitations/{invitation_id}/reject', { params: { path: { invitation_id: invitationId } } });

describe('registration and the verification email', () => {
  it('registers an unverified account that works in its own organization, and emails a link valid 24 hours', async () => {
    const { api, email, user } = await unverifiedUser(app, { organization: 'Own Org' });
    expect(await sessionOf(api)).toMatchObject({ user: { id: user.id, organization: 'Own Org', role: { name: 'super_admin' }, email_verified: false } });
    expect(await statusOf(api.PATCH('/v1/organization', { body: { name: 'Still Mine' } }))).toBe(200);

    const message = await app.inbox.next(email, { subject: SUBJECTS.verification });
    expect(message.text).toContain('24 hours');
    const token = /https:\/\/app\.example\.com\/verify-email\?token=([a-z2-7]+)/.exec(message.text)?.[1] ?? '';
    expect(token).toMatch(/^[a-z2-7]{32}$/);
    const stored = await app.db('email_verification_tokens').where({ user_id: user.id }).first();
    expect(stored).toMatchObject({ token_hash: hashToken(token), email, used_at: null });
    expect(stored.expires_at.getTime() - Date.now()).toBeGreaterThan(23.9 * 3_600_000);
    expect(stored.expires_at.getTime() - Date.now()).toBeLessThanOrEqual(24 * 3_600_000);
  });

  it('confirms from any browser without a session; every session of the user then reports the email verified', async () => {
    const { api, email } = await unverifiedUser(app);
    const token = await verificationToken(app, email);

    const { data, response } = await confirm(token);
    expect(response.status).toBe(200);
    expect(data).toEqual({ verified: true, email });
    expect((await sessionOf(api))?.user.email_verified).toBe(true);
    expect((await signedIn(app, email, PASSWORD)).user.email_verified).toBe(true);
  });

  it('refuses a used, an expired and an unknown token with 400 INVALID_VERIFICATION_TOKEN', async () => {
    const used = await unverifiedUser(app);
    const usedToken = await verificationToken(app, used.email);
    expect(await statusOf(confirm(usedToken))).toBe(200);

    const late = await unverifiedUser(app);
    const lateToken = await verificationToken(app, late.email);
    await expireVerificationToken(app, lateToken);

    for (const token of [usedToken, lateToken, 'nosuchtokennosuchtokennosuchtoke']) {
      const { error, response } = await confirm(token);
      expect(response.status).toBe(400);
      expect(error?.code).toBe('INVALID_VERIFICATION_TOKEN');
    }
    expect((await sessionOf(late.api))?.user.email_verified).toBe(false);
  });

  it('refuses a confirm from an origin that is not allowed with 403 CSRF_FAILED', async () => {
    const { email, api } = await unverifiedUser(app);
    const token = await verificationToken(app, email);
    const evil = new Browser(app.url);
    evil.origin = 'https://evil.example';
    const { error, response } = await confirm(token, evil);
    expect(response.status).toBe(403);
    expect(error?.code).toBe('CSRF_FAILED');
    expect((await sessionOf(api))?.user.email_verified).toBe(false);
  });
});

describe('resending the verification email', () => {
  it('emails a new link; either link verifies, and the other is then spent', async () => {
    const { api, email } = await unverifiedUser(app);
    const first = await verificationToken(app, email);
    const { data, response } = await resend(api);
    expect(response.status).toBe(200);
    expect(data).toEqual({ queued: true });
    const second = await verificationToken(app, email);
    expect(second).not.toBe(first);

    expect(await statusOf(confirm(second))).toBe(200);
    expect((await confirm(first)).error?.code).toBe('INVALID_VERIFICATION_TOKEN');
  });

  it('refuses an email already verified with 409 EMAIL_ALREADY_VERIFIED, and a request without the CSRF header with 403', async () => {
    const unverified = await unverifiedUser(app);
    unverified.browser.sendCsrfHeader = false;
    const withoutHeader = await resend(unverified.api);
    expect(withoutHeader.response.status).toBe(403);
    expect(withoutHeader.error?.code).toBe('CSRF_FAILED');

    const { api } = await verifiedUser(app);
    const { error, response } = await resend(api);
    expect(response.status).toBe(409);
    expect(error?.code).toBe('EMAIL_ALREADY_VERIFIED');
    expect(await statusOf(resend(new Browser(app.url).api))).toBe(401);
  });

  it('limits resends to 5 an hour per user with 429 RATE_LIMITED and Retry-After', async () => {
    const { api } = await unverifiedUser(app);
    // A client address of its own, so that only the per-user limit can answer 429.
    const from = { 'x-forwarded-for': '198.51.100.7' };
    for (let i = 0; i < 5; i++) expect(await statusOf(resend(api, from))).toBe(200);
    const { error, response } = await resend(api, from);
    expect(response.status).toBe(429);
    expect(error?.code).toBe('RATE_LIMITED');
    expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);
  });

  it('limits resends to 20 an hour per client address, whichever account asks', async () => {
    const from = { 'x-forwarded-for': '203.0.113.77' };
    const users = await Promise.all([1, 2, 3, 4, 5].map(() => unverifiedUser(app)));
    for (const { api } of users.slice(0, 4)) {
      for (let i = 0; i < 5; i++) expect(await statusOf(resend(api, from))).toBe(200);
    }
    const last = users[4]?.api ?? new Browser(app.url).api;
    expect(await statusOf(resend(last, from))).toBe(429);
    expect(await statusOf(resend(last, { 'x-forwarded-for': '203.0.113.78' }))).toBe(200);
  });

  it('limits confirm attempts to 30 per 15 minutes per client address with 429 RATE_LIMITED, even with a valid token', async () => {
    const from = { 'x-forwarded-for': '203.0.113.90' };
    const guess = () => new Browser(app.url).api.POST('/v1/user/email-verification/confirm', { body: { token: 'a'.repeat(32) }, headers: from });
    for (let i = 0; i < 30; i++) expect(await statusOf(guess())).toBe(400);
    const { api, email } = await unverifiedUser(app);
    const token = await verificationToken(app, email);
    const held = await new Browser(app.url).api.POST('/v1/user/email-verification/confirm', { body: { token }, headers: from });
    expect(held.response.status).toBe(429);
    expect(held.error).toMatchObject({ code: 'RATE_LIMITED' });
    expect(Number(held.response.headers.get('retry-after'))).toBeGreaterThan(0);
    expect((await sessionOf(api))?.user.email_verified).toBe(false);
    const elsewhere = await new Browser(app.url).api.POST('/v1/user/email-verification/confirm', { body: { token }, headers: { 'x-forwarded-for': '203.0.113.91' } });
    expect(elsewhere.response.status).toBe(200);
  });
});

describe('invitation takeover through an unverified registration', () => {
  it('keeps an account that registered the invitee address out: it lists nothing and cannot accept or decline by id', async () => {
    const owner = await registeredUser(app, { organization: 'Org A' });
    const newhire = uniqueEmail('newhire');
    const { invitation, token } = await invite(app, owner, newhire, 'admin');

    // Mallory registers the invitee address: no mailbox needed.
    const mallory = await unverifiedUser(app, { email: newhire, password: 'mallory-pass-1', organization: 'Mallory Org' });
    expect((await mallory.api.GET('/v1/invitations')).data).toEqual([]);
    for (const action of ['accept', 'reject'] as const) {
      const { error, response } = await answer(mallory.api, invitation.id, action);
      expect(response.status).toBe(403);
      expect(error?.code).toBe('EMAIL_NOT_VERIFIED');
    }
    // Any id answers the same, so nothing is learned about which invitations exist.
    expect((await answer(mallory.api, 999999, 'accept')).error?.code).toBe('EMAIL_NOT_VERIFIED');
    const { data: members = [] } = await owner.api.GET('/v1/organization/members');
    expect(members.map((m) => m.email)).not.toContain(newhire);
    expect(await sessionOf(mallory.api)).toMatchObject({ user: { organization: 'Mallory Org' } });

    // The owner of the mailbox takes the account back with a reset and joins with the invitation's link.
    await new Browser(app.url).api.POST('/v1/auth/password-reset/request', { body: { email: newhire } });
    const resetMail = await app.inbox.next(newhire, { subject: SUBJECTS.reset });
    const resetToken = /reset-password\?token=([a-z2-7]+)/.exec(resetMail.text)?.[1] ?? '';
    const reset = await new Browser(app.url).api.POST('/v1/auth/password-reset/confirm', { body: { token: resetToken, password: 'the real newhire passphrase' } });
    expect(reset.response.status).toBe(200);
    expect(await statusOf(mallory.api.GET('/v1/auth/session'))).toBe(401);
    const real = await signedIn(app, newhire, 'the real newhire passphrase');
    expect(await statusOf(real.api.POST('/v1/invitations/by-token/{token}/accept', { params: { path: { token } } }))).toBe(200);
    expect(await sessionOf(real.api)).toMatchObject({ user: { organization: 'Org A', role: { name: 'admin' }, email_verified: true } });
  });

  it('treats an address registered before the invitation the same way', async () => {
    const email = uniqueEmail('first.last');
    const squatter = await unverifiedUser(app, { email });
    const owner = await registeredUser(app);
    const { invitation } = await invite(app, owner, email, 'admin');
    expect((await squatter.api.GET('/v1/invitations')).data).toEqual([]);
    const { error, response } = await answer(squatter.api, invitation.id, 'accept');
    expect(response.status).toBe(403);
    expect(error?.code).toBe('EMAIL_NOT_VERIFIED');
    expect((await app.db('invitations').where({ id: invitation.id }).first()).status).toBe('pending');
  });

  it('lets an unverified invitee accept with the emailed token, which verifies the address', async () => {
    const owner = await registeredUser(app, { organization: 'Token Org' });
    const invitee = await unverifiedUser(app);
    const { token } = await invite(app, owner, invitee.email, 'member');
    const accepted = await invitee.api.POST('/v1/invitations/by-token/{token}/accept', { params: { path: { token } } });
    expect(accepted.response.status).toBe(200);
    expect(accepted.data).toMatchObject({ status: 'accepted', role: 'member' });
    expect(await sessionOf(invitee.api)).toMatchObject({ user: { organization: 'Token Org', email_verified: true } });
  });

  it('lists and accepts by id once the email is verified through its link', async () => {
    const owner = await registeredUser(app);
    const invitee = await unverifiedUser(app);
    const { invitation } = await invite(app, owner, invitee.email);
    expect((await invitee.api.GET('/v1/invitations')).data).toEqual([]);

    expect(await statusOf(confirm(await verificationToken(app, invitee.email)))).toBe(200);
    const { data: listed = [] } = await invitee.api.GET('/v1/invitations');
    expect(listed.map((i) => i.id)).toEqual([invitation.id]);
    expect((await answer(invitee.api, invitation.id, 'accept')).data).toMatchObject({ status: 'accepted' });
  });

  it('verifies the address of an account created through an invitation', async () => {
    const owner = await registeredUser(app);
    const email = uniqueEmail('joiner');
    const { token } = await invite(app, owner, email);
    const { data, response } = await new Browser(app.url).api.POST('/v1/invitations/register', { body: { token, password: PASSWORD } });
    expect(response.status).toBe(201);
    expect(data).toMatchObject({ user: { email, email_verified: true } });
    expect(await app.db('email_verification_tokens').join('users', 'users.id', 'email_verification_tokens.user_id').where('users.email', email).first()).toBeUndefined();
  });
});
