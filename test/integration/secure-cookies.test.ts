import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken } from '../../src/crypto.ts';
import { PASSWORD, registeredUser } from '../factories/accounts.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser, parseSetCookie } from '../helpers/browser.ts';
import { statusOf } from '../helpers/http.ts';

describe('Secure session cookies', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ SESSION_COOKIE_SECURE: 'true' });
  });
  afterAll(() => app.close());

  it('sets the session and CSRF cookies as __Host- cookies: Secure, Path=/, no Domain', async () => {
    const { response } = await new Browser(app.url).api.POST('/v1/user/register', {
      body: { email: `host-${Date.now()}@example.com`, password: PASSWORD, organization: 'Hosts' },
    });
    expect(response.status).toBe(201);
    const cookies = response.headers.getSetCookie().map(parseSetCookie);
    expect(cookies.map((c) => c.name).sort()).toEqual(['__Host-csrf_token', '__Host-session']);
    for (const cookie of cookies) {
      expect(cookie.attributes).toMatchObject({ secure: true, path: '/' });
      expect(cookie.attributes.domain).toBeUndefined();
    }
    expect(cookies.find((c) => c.name === '__Host-session')?.attributes.httponly).toBe(true);
  });

  it('accepts the __Host- cookies back, CSRF token included', async () => {
    const { browser, api } = await registeredUser(app);
    expect([...browser.cookies.keys()].sort()).toEqual(['__Host-csrf_token', '__Host-session']);
    expect(await statusOf(api.GET('/v1/auth/session'))).toBe(200);
    const { data, response } = await api.PATCH('/v1/user/profile', { body: { name: 'Host' } });
    expect(response.status).toBe(200);
    expect(data).toMatchObject({ user: { name: 'Host' } });
  });

  it('ignores cookies without the prefix, as a sibling subdomain or a plain-HTTP page could plant them', async () => {
    const { browser } = await registeredUser(app);
    const token = browser.cookies.get('__Host-session') ?? '';
    const csrf = browser.cookies.get('__Host-csrf_token') ?? '';
    const unprefixed = new Browser(app.url);
    unprefixed.cookies.set('session', token);
    expect(await statusOf(unprefixed.api.GET('/v1/auth/session'))).toBe(401);
    // The real session cookie, with a planted unprefixed CSRF cookie echoed in the header.
    const planted = new Browser(app.url);
    planted.cookies.set('__Host-session', token);
    planted.cookies.set('csrf_token', csrf);
    const { error, response } = await planted.api.PATCH('/v1/user/profile', { body: { name: 'Planted' }, headers: { 'x-csrf-token': csrf } });
    expect(response.status).toBe(403);
    expect(error).toMatchObject({ code: 'CSRF_FAILED' });
    expect(await app.db('sessions').where({ id: hashToken(token) }).first()).toBeDefined();
  });
});
