import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken } from '../../src/crypto.ts';
import { PASSWORD, registeredUser, signedIn, SUBJECTS, uniqueEmail, unverifiedUser } from '../factories/accounts.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser } from '../helpers/browser.ts';
import { statusOf } from '../helpers/http.ts';
import { waitUntil } from '../helpers/net.ts';
import { expireResetToken } from '../helpers/time-travel.ts';

let app: TestApp;
beforeAll(async () => {
  // Behind a trusted proxy, so a test can speak from a client address of its own (X-Forwarded-For).
  app = await startTestApp({ WEB_APP_URL: 'https://app.example.com', TRUST_PROXY: 'true' }, { workers: true });
});
afterAll(() => app.close());

const NEW_PASSWORD = 'a brand new passphrase';

const requestReset = (on: TestApp, email: string) => new Browser(on.url).api.POST('/v1/auth/password-reset/request', { body: { email } });
const signIn = (email: string, password: string) => new Browser(app.url).api.POST('/v1/user/signin', { body: { email, password } });

/** Asks for a reset through the API and reads the token out of the email the SMTP listener got. */
async function resetToken(email: string): Promise<string> {
  const { data, response } = await requestReset(app, email);
  expect(response.status).toBe(200);
  expect(data).toEqual({ accepted: true });
  const message = await app.inbox.next(email, { subject: SUBJECTS.reset });
  expect(message.subject).toBe('Reset your password');
  const link = /https:\/\/app\.example\.com\/reset-password\?token=([a-z2-7]+)/.exec(message.text);
  expect(link).not.toBeNull();
  return link?.[1] ?? '';
}

const confirm = (token: string, password = NEW_PASSWORD, headers: Record<string, string> = {}) =>
  new Browser(app.url).api.POST('/v1/auth/password-reset/confirm', { body: { token, password }, headers });

describe('password reset', () => {
  it('emails a single-use link; confirming sets the password and ends every session', async () => {
    const { api, email } = await unverifiedUser(app);
    const other = await signedIn(app, email);

    const token = await resetToken(email);
    expect(await app.db('password_reset_tokens').where({ token_hash: token }).first()).toBeUndefined();
    expect(await app.db('password_reset_tokens').where({ token_hash: hashToken(token) }).first()).toBeDefined();

    const { data, response } = await confirm(token);
    expect(response.status).toBe(200);
    expect(data).toEqual({ reset: true });

    expect(await statusOf(api.GET('/v1/auth/session'))).toBe(401);
    expect(await statusOf(other.api.GET('/v1/auth/session'))).toBe(401);
    expect(await statusOf(signIn(email, PASSWORD))).toBe(401);
    const signedInAgain = await signIn(email, NEW_PASSWORD);
    expect(signedInAgain.response.status).toBe(200);
    // The token came by email: the address is proven.
    expect(signedInAgain.data).toMatchObject({ user: { email_verified: true } });
  });

  it('spends every outstanding reset link of the user: after confirming with one, an earlier one is refused', async () => {
    const { email } = await registeredUser(app);
    const first = await resetToken(email);
    const second = await resetToken(email);
    expect(first).not.toBe(second);

    expect(await statusOf(confirm(first))).toBe(200);
    const late = await confirm(second, 'the attacker’s passphrase');
    expect(late.response.status).toBe(400);
    expect(late.error).toMatchObject({ code: 'INVALID_RESET_TOKEN' });
    expect(await statusOf(signIn(email, NEW_PASSWORD))).toBe(200);
  });

  it('refuses a common password or the account’s email with 422 at body/password, leaving the token unused', async () => {
    const { email } = await registeredUser(app);
    const token = await resetToken(email);
    for (const password of ['12345678', 'Password', email, email.split('@')[0]?.toUpperCase() ?? '']) {
      const { error, response } = await confirm(token, password);
      expect(response.status).toBe(422);
      expect(error?.errors?.map((e) => e.location)).toEqual(['body/password']);
    }
    expect(await statusOf(confirm(token))).toBe(200);
  });

  it('looks the token up before the password: an unknown token with a refused password answers 400', async () => {
    const { error, response } = await confirm('nosuchtokennosuchtokennosuchtoke', 'password');
    expect(response.status).toBe(400);
    expect(error).toMatchObject({ code: 'INVALID_RESET_TOKEN' });
  });

  it('limits confirms to 30 per 15 minutes per client address with 429 and Retry-After', async () => {
    const { email } = await registeredUser(app);
    const token = await resetToken(email);
    const from = { 'x-forwarded-for': '203.0.113.20' };
    for (let i = 0; i < 30; i++) expect(await statusOf(confirm(`bogus${i}`.padEnd(32, 'x'), NEW_PASSWORD, from))).toBe(400);
    const limited = await confirm(token, NEW_PASSWORD, from);
    expect(limited.response.status).toBe(429);
    expect(limited.error).toMatchObject({ code: 'RATE_LIMITED' });
    expect(Number(limited.response.headers.get('retry-after'))).toBeGreaterThan(0);
    // The valid token was not touched, and works from another address.
    expect(await statusOf(confirm(token, NEW_PASSWORD, { 'x-forwarded-for': '203.0.113.21' }))).toBe(200);
  });

  it('refuses a token used once already with 400 INVALID_RESET_TOKEN', async () => {
    const { email } = await registeredUser(app);
    const token = await resetToken(email);
    expect(await statusOf(confirm(token))).toBe(200);
    const again = await confirm(token, 'yet another passphrase');
    expect(again.response.status).toBe(400);
    expect(again.error).toMatchObject({ code: 'INVALID_RESET_TOKEN' });
    expect(await statusOf(signIn(email, NEW_PASSWORD))).toBe(200);
  });

  it('refuses a token older than an hour, and an unknown one', async () => {
    const { email } = await registeredUser(app);
    const token = await resetToken(email);
    await expireResetToken(app, token);
    expect(await statusOf(confirm(token))).toBe(400);
    expect(await statusOf(confirm('nosuchtokennosuchtokennosuchtoke'))).toBe(400);
  });

  it('answers the same for an email with no account, and sends nothing', async () => {
    const email = uniqueEmail('ghost');
    const { data, response } = await requestReset(app, email);
    expect(response.status).toBe(200);
    expect(data).toEqual({ accepted: true });
    await waitUntil(
      async () => (await app.db('pgboss.job').where({ name: 'password-reset-request', state: 'completed' }).whereRaw("data->>'email' = ?", [email]).first()) !== undefined,
      'the reset job to finish',
    );
    expect(await app.db('emails').where({ to_address: email }).first()).toBeUndefined();
    expect(app.inbox.all(email)).toEqual([]);
  });

  it('refuses a new password outside 8 to 72 bytes, leaving the token unused', async () => {
    const { email } = await registeredUser(app);
    const token = await resetToken(email);
    expect(await statusOf(confirm(token, '€'.repeat(25)))).toBe(422);
    expect(await statusOf(confirm(token))).toBe(200);
  });

  it('limits requests per email to 5 an hour with 429 and Retry-After', async () => {
    const email = uniqueEmail('flood');
    for (let i = 0; i < 5; i++) expect(await statusOf(requestReset(app, email))).toBe(200);
    const { response } = await requestReset(app, email);
    expect(response.status).toBe(429);
    expect(response.headers.get('retry-after')).toMatch(/^\d+$/);
  });

  it('records the delivery: sent, with the body no longer kept', async () => {
    const { email } = await registeredUser(app);
    await resetToken(email);
    await waitUntil(async () => (await app.db('emails').where({ to_address: email, template: 'password_reset', status: 'sent' }).first()) !== undefined, 'the email to be recorded as sent');
    expect(await app.db('emails').where({ to_address: email, template: 'password_reset' }).first()).toMatchObject({ status: 'sent', sealed_body: null, last_error: null, attempts: 1 });
  });
});

describe('email delivery failures', () => {
  it('keeps emails while the SMTP server is down and sends each once when it is back', async () => {
    const app = await startTestApp({ EMAIL_RETRY_DELAY_SECONDS: '1', EMAIL_RETRY_MAX_DELAY_SECONDS: '2' }, { workers: true });
    try {
      app.inbox.refuse = true;
      const emails = await Promise.all([registeredUser(app), registeredUser(app), registeredUser(app)]).then((users) => users.map((user) => user.email));
      for (const email of emails) expect(await statusOf(requestReset(app, email))).toBe(200);
      const resets = () => app.db('emails').whereIn('to_address', emails).where({ template: 'password_reset' });
      // Down: every reset email fails at least twice and stays queued, its body kept for the retry.
      // The reset emails are written by a job after the 200: all three rows first, then their attempts.
      await waitUntil(async () => {
        const rows = await resets();
        return rows.length === emails.length && rows.every((row) => row.attempts >= 2);
      }, 'two refused attempts of each email', 60_000);
      expect((await resets()).map((row) => [row.status, row.sealed_body !== null])).toEqual(emails.map(() => ['queued', true]));

      app.inbox.refuse = false;
      await waitUntil(async () => {
        const rows = await resets();
        return rows.length === emails.length && rows.every((row) => row.status === 'sent');
      }, 'every email to go out once the server is back', 60_000);
      for (const email of emails) {
        expect(app.inbox.all(email).filter((message) => message.subject === SUBJECTS.reset)).toHaveLength(1);
      }
    } finally {
      await app.close();
    }
    // Its two waits allow 60 s each: a retry no wake-up reached is fetched by the worker's 30 s poll.
  }, 150_000);

  it('records the SMTP error, retries, and marks the email failed after the last attempt', async () => {
    const failing = await startTestApp({ EMAIL_RETRY_LIMIT: '1', EMAIL_RETRY_DELAY_SECONDS: '1' }, { workers: true });
    try {
      failing.inbox.refuse = true;
      const { email } = await registeredUser(failing);
      expect(await statusOf(requestReset(failing, email))).toBe(200);
      await waitUntil(async () => (await failing.db('emails').where({ to_address: email, template: 'password_reset', status: 'failed' }).first()) !== undefined, 'the email to fail');
      expect(await failing.db('emails').where({ to_address: email, template: 'password_reset' }).first()).toMatchObject({
        status: 'failed',
        attempts: 2,
        last_error: expect.stringContaining('Mailbox unavailable'),
        sealed_body: null,
        sent_at: null,
      });
    } finally {
      await failing.close();
    }
  });
});
