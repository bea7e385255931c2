import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken } from '../../src/crypto.ts';
import { registeredUser } from '../factories/accounts.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { parseSetCookie } from '../helpers/browser.ts';
import { jsonOf, type Problem } from '../helpers/http.ts';

describe('Secure session cookies', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ SESSION_COOKIE_SECURE: 'true' });
  });
  afterAll(() => app.close());

  it('sets the session and CSRF cookies as __Host- cookies: Secure, Path=/, no Domain', async () => {
    const response = await fetch(`${app.url}/v1/user/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: `host-${Date.now()}@example.com`, password: 'correct horse battery staple', organization: 'Hosts' }),
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
    const { browser } = await registeredUser(app);
    expect([...browser.cookies.keys()].sort()).toEqual(['__Host-csrf_token', '__Host-session']);
    expect((await browser.get('/v1/auth/session')).status).toBe(200);
    const response = await browser.patch('/v1/user/profile', { name: 'Host' });
    expect(response.status).toBe(200);
    expect(await jsonOf(response)).toMatchObject({ user: { name: 'Host' } });
  });

  it('ignores cookies without the prefix, as a sibling subdomain or a plain-HTTP page could plant them', async () => {
    const { browser } = await registeredUser(app);
    const token = browser.cookies.get('__Host-session') ?? '';
    const csrf = browser.cookies.get('__Host-csrf_token') ?? '';
    const unprefixed = await fetch(`${app.url}/v1/auth/session`, { headers: { cookie: `session=${token}` } });
    expect(unprefixed.status).toBe(401);
    const plantedCsrf = await fetch(`${app.url}/v1/user/profile`, {
      method: 'PATCH',
      headers: { cookie: `__Host-session=${token}; csrf_token=${csrf}`, 'x-csrf-token': csrf, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'Planted' }),
    });
    expect(plantedCsrf.status).toBe(403);
    expect(await jsonOf<Problem>(plantedCsrf)).toMatchObject({ code: 'CSRF_FAILED' });
    expect(await app.db('sessions').where({ id: hashToken(token) }).first()).toBeDefined();
  });
});
