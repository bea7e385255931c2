import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { hashToken } from '../../src/crypto.ts';
import { registeredUser, signedIn } from '../factories/accounts.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import type { Api, Browser } from '../helpers/browser.ts';
import { statusOf } from '../helpers/http.ts';
import { ageSession } from '../helpers/time-travel.ts';

let app: TestApp;
beforeAll(async () => {
  app = await startTestApp();
});
afterAll(() => app.close());

const DAY = 86_400_000;

type UserSession = components['schemas']['UserSession'];

/** A user signed in twice: in the browser of registration, and in a second one. */
async function signedInTwice() {
  const user = await registeredUser(app);
  const second = await signedIn(app, user.email);
  return { ...user, first: user.browser, second: second.browser };
}

const sessionTokenOf = (browser: Browser) => browser.cookies.get('session') ?? '';
const sessionIdOf = (browser: Browser) => hashToken(sessionTokenOf(browser));
const sessionsOf = async (api: Api): Promise<UserSession[]> => (await api.GET('/v1/user/sessions')).data ?? [];
const endSession = (api: Api, sessionId: string) => api.DELETE('/v1/user/sessions/{session_id}', { params: { path: { session_id: sessionId } } });

describe('the absolute lifetime of a session', () => {
  it('ends a session 90 days after sign-in even if it was used the day before', async () => {
    const { browser } = await registeredUser(app);
    await ageSession(app, sessionTokenOf(browser), { createdAt: new Date(Date.now() - 90 * DAY - 1000), expiresAt: new Date(Date.now() + 29 * DAY) });
    const { error, response } = await browser.api.GET('/v1/auth/session');
    expect(response.status).toBe(401);
    expect(error).toMatchObject({ code: 'UNAUTHENTICATED' });
    expect(await app.db('sessions').where({ id: sessionIdOf(browser) }).first()).toBeUndefined();
  });

  it('slides no further than 90 days after sign-in', async () => {
    const { browser } = await registeredUser(app);
    const id = sessionIdOf(browser);
    const createdAt = new Date(Date.now() - 85 * DAY);
    await ageSession(app, sessionTokenOf(browser), { createdAt, expiresAt: new Date(Date.now() + 2 * DAY) });
    const { data, response } = await browser.api.GET('/v1/auth/session');
    expect(response.status).toBe(200);
    const { expires_at } = await app.db('sessions').where({ id }).first();
    expect(expires_at.getTime()).toBe(createdAt.getTime() + 90 * DAY);
    expect(data?.session.expires_at).toBe(expires_at.toISOString());
  });
});

describe('listing one’s sessions', () => {
  it('lists both sessions of a user signed in twice, marks the current one, and never shows a token or its hash', async () => {
    const { first, second } = await signedInTwice();
    const { data: sessions = [], response } = await first.api.GET('/v1/user/sessions');
    expect(response.status).toBe(200);
    expect(sessions).toHaveLength(2);
    expect(sessions.map((s) => s.current).sort()).toEqual([false, true]);
    expect(sessions.every((s) => s.auth_method === 'password')).toBe(true);
    const text = JSON.stringify(sessions);
    for (const browser of [first, second]) {
      expect(text).not.toContain(browser.cookies.get('session'));
      expect(text).not.toContain(sessionIdOf(browser));
    }
    const fromSecond = await sessionsOf(second.api);
    expect(fromSecond.find((s) => s.current)?.id).toBe(sessions.find((s) => !s.current)?.id);
  });

  it('lists only the caller’s own sessions', async () => {
    const { first } = await signedInTwice();
    await registeredUser(app);
    expect(await sessionsOf(first.api)).toHaveLength(2);
  });
});

describe('ending sessions', () => {
  it('ends another session by its id: it answers 401 at once, the current one keeps working', async () => {
    const { first, second } = await signedInTwice();
    const other = (await sessionsOf(first.api)).find((s) => !s.current);
    const { response } = await endSession(first.api, other?.id ?? '');
    expect(response.status).toBe(204);
    expect(response.headers.getSetCookie()).toEqual([]);
    expect(await statusOf(second.api.GET('/v1/auth/session'))).toBe(401);
    expect(await statusOf(first.api.GET('/v1/auth/session'))).toBe(200);
    expect(await sessionsOf(first.api)).toHaveLength(1);
  });

  it('signs this browser out when the session ended is the current one', async () => {
    const { first } = await signedInTwice();
    const current = (await sessionsOf(first.api)).find((s) => s.current);
    expect(await statusOf(endSession(first.api, current?.id ?? ''))).toBe(204);
    expect(first.cookies.size).toBe(0);
    expect(await statusOf(first.api.GET('/v1/auth/session'))).toBe(401);
  });

  it('answers 404 for another user’s session id, and leaves that session alone', async () => {
    const victim = await signedInTwice();
    const victimSession = (await sessionsOf(victim.first.api))[0];
    const { api: attacker } = await registeredUser(app);
    const { error, response } = await endSession(attacker, victimSession?.id ?? '');
    expect(response.status).toBe(404);
    expect(error).toMatchObject({ code: 'NOT_FOUND' });
    expect(await statusOf(victim.first.api.GET('/v1/auth/session'))).toBe(200);
    expect(await statusOf(victim.second.api.GET('/v1/auth/session'))).toBe(200);
  });

  it('refuses an id that is not a UUID with 422', async () => {
    const { browser } = await registeredUser(app);
    const { error, response } = await endSession(browser.api, sessionIdOf(browser));
    expect(response.status).toBe(422);
    expect(error).toMatchObject({ code: 'VALIDATION_FAILED' });
  });

  it('needs the CSRF token to end a session', async () => {
    const { first } = await signedInTwice();
    const other = (await sessionsOf(first.api)).find((s) => !s.current);
    first.sendCsrfHeader = false;
    expect(await statusOf(endSession(first.api, other?.id ?? ''))).toBe(403);
  });

  it('signs out everywhere else: every other session answers 401, this one keeps working', async () => {
    const { first, second, email } = await signedInTwice();
    const third = await signedIn(app, email);
    const { data, response } = await first.api.POST('/v1/user/sessions/revoke-others');
    expect(response.status).toBe(200);
    expect(data).toEqual({ revoked: 2 });
    expect(await statusOf(second.api.GET('/v1/auth/session'))).toBe(401);
    expect(await statusOf(third.api.GET('/v1/auth/session'))).toBe(401);
    expect(await statusOf(first.api.GET('/v1/auth/session'))).toBe(200);
  });
});
