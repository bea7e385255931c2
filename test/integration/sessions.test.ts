import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken } from '../../src/crypto.ts';
import { PASSWORD, registeredUser } from '../factories/accounts.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser } from '../helpers/browser.ts';
import { jsonOf, type Problem } from '../helpers/http.ts';

let app: TestApp;
beforeAll(async () => {
  app = await startTestApp();
});
afterAll(() => app.close());

const DAY = 86_400_000;

interface UserSession {
  id: string;
  created_at: string;
  expires_at: string;
  auth_method: string;
  current: boolean;
}

/** A user signed in twice: in the browser of registration, and in a second one. */
async function signedInTwice() {
  const user = await registeredUser(app);
  const second = new Browser(app.url);
  expect((await second.post('/v1/user/signin', { email: user.email, password: PASSWORD })).status).toBe(200);
  return { ...user, first: user.browser, second };
}

const sessionIdOf = (browser: Browser) => hashToken(browser.cookies.get('session') ?? '');

describe('the absolute lifetime of a session', () => {
  it('ends a session 90 days after sign-in even if it was used the day before', async () => {
    const { browser } = await registeredUser(app);
    const id = sessionIdOf(browser);
    await app.db('sessions').where({ id }).update({ created_at: new Date(Date.now() - 90 * DAY - 1000), expires_at: new Date(Date.now() + 29 * DAY) });
    const response = await browser.get('/v1/auth/session');
    expect(response.status).toBe(401);
    expect(await jsonOf<Problem>(response)).toMatchObject({ code: 'UNAUTHENTICATED' });
    expect(await app.db('sessions').where({ id }).first()).toBeUndefined();
  });

  it('slides no further than 90 days after sign-in', async () => {
    const { browser } = await registeredUser(app);
    const id = sessionIdOf(browser);
    const createdAt = new Date(Date.now() - 85 * DAY);
    await app.db('sessions').where({ id }).update({ created_at: createdAt, expires_at: new Date(Date.now() + 2 * DAY) });
    const response = await browser.get('/v1/auth/session');
    expect(response.status).toBe(200);
    const { expires_at } = await app.db('sessions').where({ id }).first();
    expect(expires_at.getTime()).toBe(createdAt.getTime() + 90 * DAY);
    expect((await jsonOf<{ session: { expires_at: string } }>(response)).session.expires_at).toBe(expires_at.toISOString());
  });
});

describe('listing one’s sessions', () => {
  it('lists both sessions of a user signed in twice, marks the current one, and never shows a token or its hash', async () => {
    const { first, second } = await signedInTwice();
    const response = await first.get('/v1/user/sessions');
    expect(response.status).toBe(200);
    const sessions = await jsonOf<UserSession[]>(response);
    expect(sessions).toHaveLength(2);
    expect(sessions.map((s) => s.current).sort()).toEqual([false, true]);
    expect(sessions.every((s) => s.auth_method === 'password')).toBe(true);
    const text = JSON.stringify(sessions);
    for (const browser of [first, second]) {
      expect(text).not.toContain(browser.cookies.get('session'));
      expect(text).not.toContain(sessionIdOf(browser));
    }
    const fromSecond = await jsonOf<UserSession[]>(await second.get('/v1/user/sessions'));
    expect(fromSecond.find((s) => s.current)?.id).toBe(sessions.find((s) => !s.current)?.id);
  });

  it('lists only the caller’s own sessions', async () => {
    const { first } = await signedInTwice();
    await registeredUser(app);
    expect(await jsonOf<UserSession[]>(await first.get('/v1/user/sessions'))).toHaveLength(2);
  });
});

describe('ending sessions', () => {
  it('ends another session by its id: it answers 401 at once, the current one keeps working', async () => {
    const { first, second } = await signedInTwice();
    const other = (await jsonOf<UserSession[]>(await first.get('/v1/user/sessions'))).find((s) => !s.current);
    const response = await first.delete(`/v1/user/sessions/${other?.id}`);
    expect(response.status).toBe(204);
    expect(response.headers.getSetCookie()).toEqual([]);
    expect((await second.get('/v1/auth/session')).status).toBe(401);
    expect((await first.get('/v1/auth/session')).status).toBe(200);
    expect(await jsonOf<UserSession[]>(await first.get('/v1/user/sessions'))).toHaveLength(1);
  });

  it('signs this browser out when the session ended is the current one', async () => {
    const { first } = await signedInTwice();
    const current = (await jsonOf<UserSession[]>(await first.get('/v1/user/sessions'))).find((s) => s.current);
    const response = await first.delete(`/v1/user/sessions/${current?.id}`);
    expect(response.status).toBe(204);
    expect(first.cookies.size).toBe(0);
    expect((await first.get('/v1/auth/session')).status).toBe(401);
  });

  it('answers 404 for another user’s session id, and leaves that session alone', async () => {
    const victim = await signedInTwice();
    const victimSession = (await jsonOf<UserSession[]>(await victim.first.get('/v1/user/sessions')))[0];
    const { browser: attacker } = await registeredUser(app);
    const response = await attacker.delete(`/v1/user/sessions/${victimSession?.id}`);
    expect(response.status).toBe(404);
    expect(await jsonOf<Problem>(response)).toMatchObject({ code: 'NOT_FOUND' });
    expect((await victim.first.get('/v1/auth/session')).status).toBe(200);
    expect((await victim.second.get('/v1/auth/session')).status).toBe(200);
  });

  it('refuses an id that is not a UUID with 422', async () => {
    const { browser } = await registeredUser(app);
    const response = await browser.delete(`/v1/user/sessions/${sessionIdOf(browser)}`);
    expect(response.status).toBe(422);
    expect(await jsonOf<Problem>(response)).toMatchObject({ code: 'VALIDATION_FAILED' });
  });

  it('needs the CSRF token to end a session', async () => {
    const { first } = await signedInTwice();
    const other = (await jsonOf<UserSession[]>(await first.get('/v1/user/sessions'))).find((s) => !s.current);
    first.sendCsrfHeader = false;
    expect((await first.delete(`/v1/user/sessions/${other?.id}`)).status).toBe(403);
  });

  it('signs out everywhere else: every other session answers 401, this one keeps working', async () => {
    const { first, second, email } = await signedInTwice();
    const third = new Browser(app.url);
    expect((await third.post('/v1/user/signin', { email, password: PASSWORD })).status).toBe(200);
    const response = await first.post('/v1/user/sessions/revoke-others');
    expect(response.status).toBe(200);
    expect(await jsonOf(response)).toEqual({ revoked: 2 });
    expect((await second.get('/v1/auth/session')).status).toBe(401);
    expect((await third.get('/v1/auth/session')).status).toBe(401);
    expect((await first.get('/v1/auth/session')).status).toBe(200);
  });
});
