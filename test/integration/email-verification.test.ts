import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken } from '../../src/crypto.ts';
import { PASSWORD, registeredUser, SUBJECTS, uniqueEmail, verificationToken, verifiedUser } from '../factories/accounts.ts';
import { invite } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser } from '../helpers/browser.ts';
import { jsonOf, type Problem } from '../helpers/http.ts';

let app: TestApp;
beforeAll(async () => {
  // Behind a trusted proxy, so a test can speak from a client address of its own (X-Forwarded-For).
  app = await startTestApp({ WEB_APP_URL: 'https://app.example.com', TRUST_PROXY: 'true' }, { workers: true });
});
afterAll(() => app.close());

type Session = { user: { id: number; email: string; organization: string; role: { name: string }; email_verified: boolean } };
interface Invitation {
  id: number;
  status: string;
  role: string;
}

const codeOf = async (response: Response) => (await jsonOf<Problem>(response)).code;
const confirm = (token: string, browser = new Browser(app.url)) => browser.post('/v1/user/email-verification/confirm', { token });
const sessionOf = async (browser: Browser) => jsonOf<Session>(await browser.get('/v1/auth/session'));

describe('registration and the verification email', () => {
  it('registers an unverified account that works in its own organization, and emails a link valid 24 hours', async () => {
    const { browser, email, user } = await registeredUser(app, { organization: 'Own Org' });
    expect(await sessionOf(browser)).toMatchObject({ user: { id: user.id, organization: 'Own Org', role: { name: 'super_admin' }, email_verified: false } });
    expect((await browser.patch('/v1/organization', { name: 'Still Mine' })).status).toBe(200);

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
    const { browser, email } = await registeredUser(app);
    const token = await verificationToken(app, email);

    const response = await confirm(token);
    expect(response.status).toBe(200);
    expect(await jsonOf(response)).toEqual({ verified: true, email });
    expect((await sessionOf(browser)).user.email_verified).toBe(true);
    const signedIn = new Browser(app.url);
    expect(await jsonOf(await signedIn.post('/v1/user/signin', { email, password: PASSWORD }))).toMatchObject({ user: { email_verified: true } });
  });

  it('refuses a used, an expired and an unknown token with 400 INVALID_VERIFICATION_TOKEN', async () => {
    const used = await registeredUser(app);
    const usedToken = await verificationToken(app, used.email);
    expect((await confirm(usedToken)).status).toBe(200);

    const late = await registeredUser(app);
    const lateToken = await verificationToken(app, late.email);
    await app.db('email_verification_tokens').where({ token_hash: hashToken(lateToken) }).update({ expires_at: new Date(Date.now() - 1000) });

    for (const token of [usedToken, lateToken, 'nosuchtokennosuchtokennosuchtoke']) {
      const response = await confirm(token);
      expect(response.status).toBe(400);
      expect(await codeOf(response)).toBe('INVALID_VERIFICATION_TOKEN');
    }
    expect((await sessionOf(late.browser)).user.email_verified).toBe(false);
  });

  it('refuses a confirm from an origin that is not allowed with 403 CSRF_FAILED', async () => {
    const { email, browser } = await registeredUser(app);
    const token = await verificationToken(app, email);
    const evil = new Browser(app.url);
    evil.origin = 'https://evil.example';
    const response = await confirm(token, evil);
    expect(response.status).toBe(403);
    expect(await codeOf(response)).toBe('CSRF_FAILED');
    expect((await sessionOf(browser)).user.email_verified).toBe(false);
  });
});

describe('resending the verification email', () => {
  it('emails a new link; either link verifies, and the other is then spent', async () => {
    const { browser, email } = await registeredUser(app);
    const first = await verificationToken(app, email);
    const response = await browser.post('/v1/user/email-verification/resend');
    expect(response.status).toBe(200);
    expect(await jsonOf(response)).toEqual({ queued: true });
    const second = await verificationToken(app, email);
    expect(second).not.toBe(first);

    expect((await confirm(second)).status).toBe(200);
    expect(await codeOf(await confirm(first))).toBe('INVALID_VERIFICATION_TOKEN');
  });

  it('refuses an email already verified with 409 EMAIL_ALREADY_VERIFIED, and a request without the CSRF header with 403', async () => {
    const unverified = await registeredUser(app);
    unverified.browser.sendCsrfHeader = false;
    const withoutHeader = await unverified.browser.post('/v1/user/email-verification/resend');
    expect(withoutHeader.status).toBe(403);
    expect(await codeOf(withoutHeader)).toBe('CSRF_FAILED');

    const { browser } = await verifiedUser(app);
    const response = await browser.post('/v1/user/email-verification/resend');
    expect(response.status).toBe(409);
    expect(await codeOf(response)).toBe('EMAIL_ALREADY_VERIFIED');
    expect((await new Browser(app.url).post('/v1/user/email-verification/resend')).status).toBe(401);
  });

  it('limits resends to 5 an hour per user with 429 RATE_LIMITED and Retry-After', async () => {
    const { browser } = await registeredUser(app);
    // A client address of its own, so that only the per-user limit can answer 429.
    const from = { 'x-forwarded-for': '198.51.100.7' };
    for (let i = 0; i < 5; i++) expect((await browser.post('/v1/user/email-verification/resend', undefined, from)).status).toBe(200);
    const response = await browser.post('/v1/user/email-verification/resend', undefined, from);
    expect(response.status).toBe(429);
    expect(await codeOf(response)).toBe('RATE_LIMITED');
    expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);
  });

  it('limits resends to 20 an hour per client address, whichever account asks', async () => {
    const from = { 'x-forwarded-for': '203.0.113.77' };
    const users = await Promise.all([1, 2, 3, 4, 5].map(() => registeredUser(app)));
    for (const { browser } of users.slice(0, 4)) {
      for (let i = 0; i < 5; i++) expect((await browser.post('/v1/user/email-verification/resend', undefined, from)).status).toBe(200);
    }
    const last = users[4]?.browser ?? new Browser(app.url);
    expect((await last.post('/v1/user/email-verification/resend', undefined, from)).status).toBe(429);
    expect((await last.post('/v1/user/email-verification/resend', undefined, { 'x-forwarded-for': '203.0.113.78' })).status).toBe(200);
  });
});

describe('invitation takeover through an unverified registration (security review, finding 1)', () => {
  it('keeps an account that registered the invitee address out: it lists nothing and cannot accept or decline by id', async () => {
    const owner = await registeredUser(app, { organization: 'Org A' });
    const newhire = uniqueEmail('newhire');
    const { invitation, token } = await invite(app, owner.browser, newhire, 'admin');

    // Mallory registers the invitee address: no mailbox needed.
    const mallory = await registeredUser(app, { email: newhire, password: 'mallory-pass-1', organization: 'Mallory Org' });
    expect(await jsonOf(await mallory.browser.get('/v1/invitations'))).toEqual([]);
    for (const action of ['accept', 'reject']) {
      const response = await mallory.browser.post(`/v1/invitations/${invitation.id}/${action}`);
      expect(response.status).toBe(403);
      expect(await codeOf(response)).toBe('EMAIL_NOT_VERIFIED');
    }
    // Any id answers the same, so nothing is learned about which invitations exist.
    expect(await codeOf(await mallory.browser.post('/v1/invitations/999999/accept'))).toBe('EMAIL_NOT_VERIFIED');
    const members = await jsonOf<Array<{ email: string }>>(await owner.browser.get('/v1/organization/members'));
    expect(members.map((m) => m.email)).not.toContain(newhire);
    expect(await jsonOf(await mallory.browser.get('/v1/auth/session'))).toMatchObject({ user: { organization: 'Mallory Org' } });

    // The owner of the mailbox takes the account back with a reset and joins with the invitation's link.
    await new Browser(app.url).post('/v1/auth/password-reset/request', { email: newhire });
    const resetMail = await app.inbox.next(newhire, { subject: SUBJECTS.reset });
    const resetToken = /reset-password\?token=([a-z2-7]+)/.exec(resetMail.text)?.[1] ?? '';
    expect((await new Browser(app.url).post('/v1/auth/password-reset/confirm', { token: resetToken, password: 'the real newhire passphrase' })).status).toBe(200);
    expect((await mallory.browser.get('/v1/auth/session')).status).toBe(401);
    const real = new Browser(app.url);
    expect((await real.post('/v1/user/signin', { email: newhire, password: 'the real newhire passphrase' })).status).toBe(200);
    const accepted = await real.post(`/v1/invitations/by-token/${token}/accept`);
    expect(accepted.status).toBe(200);
    expect(await jsonOf(await real.get('/v1/auth/session'))).toMatchObject({ user: { organization: 'Org A', role: { name: 'admin' }, email_verified: true } });
  });

  it('treats an address registered before the invitation the same way', async () => {
    const email = uniqueEmail('first.last');
    const squatter = await registeredUser(app, { email });
    const owner = await registeredUser(app);
    const { invitation } = await invite(app, owner.browser, email, 'admin');
    expect(await jsonOf(await squatter.browser.get('/v1/invitations'))).toEqual([]);
    const response = await squatter.browser.post(`/v1/invitations/${invitation.id}/accept`);
    expect(response.status).toBe(403);
    expect(await codeOf(response)).toBe('EMAIL_NOT_VERIFIED');
    expect((await app.db('invitations').where({ id: invitation.id }).first()).status).toBe('pending');
  });

  it('lets an unverified invitee accept with the emailed token, which verifies the address', async () => {
    const owner = await registeredUser(app, { organization: 'Token Org' });
    const invitee = await registeredUser(app);
    const { token } = await invite(app, owner.browser, invitee.email, 'member');
    const accepted = await invitee.browser.post(`/v1/invitations/by-token/${token}/accept`);
    expect(accepted.status).toBe(200);
    expect(await jsonOf<Invitation>(accepted)).toMatchObject({ status: 'accepted', role: 'member' });
    expect(await sessionOf(invitee.browser)).toMatchObject({ user: { organization: 'Token Org', email_verified: true } });
  });

  it('lists and accepts by id once the email is verified through its link', async () => {
    const owner = await registeredUser(app);
    const invitee = await registeredUser(app);
    const { invitation } = await invite(app, owner.browser, invitee.email);
    expect(await jsonOf(await invitee.browser.get('/v1/invitations'))).toEqual([]);

    expect((await confirm(await verificationToken(app, invitee.email))).status).toBe(200);
    const listed = await jsonOf<Invitation[]>(await invitee.browser.get('/v1/invitations'));
    expect(listed.map((i) => i.id)).toEqual([invitation.id]);
    expect(await jsonOf<Invitation>(await invitee.browser.post(`/v1/invitations/${invitation.id}/accept`))).toMatchObject({ status: 'accepted' });
  });

  it('verifies the address of an account created through an invitation', async () => {
    const owner = await registeredUser(app);
    const email = uniqueEmail('joiner');
    const { token } = await invite(app, owner.browser, email);
    const response = await new Browser(app.url).post('/v1/invitations/register', { token, password: PASSWORD });
    expect(response.status).toBe(201);
    expect(await jsonOf(response)).toMatchObject({ user: { email, email_verified: true } });
    expect(await app.db('email_verification_tokens').join('users', 'users.id', 'email_verification_tokens.user_id').where('users.email', email).first()).toBeUndefined();
  });
});
