import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { hashToken } from '../../src/crypto.ts';
import { PASSWORD, registeredUser, uniqueEmail } from '../factories/accounts.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser, parseSetCookie } from '../helpers/browser.ts';
import { statusOf, unchecked } from '../helpers/http.ts';
import { ageSession } from '../helpers/time-travel.ts';

let app: TestApp;
beforeAll(async () => {
  // Behind a trusted proxy, so a test can speak from a client address of its own (X-Forwarded-For).
  app = await startTestApp({ TRUST_PROXY: 'true' });
});
afterAll(() => app.close());

type RegisterRequest = components['schemas']['RegisterRequest'];
const register = (body: RegisterRequest, headers: Record<string, string> = {}) => new Browser(app.url).api.POST('/v1/user/register', { body, headers });

describe('registration', () => {
  it('creates the user, their organization, super_admin membership and billing account, and signs them in', async () => {
    const browser = new Browser(app.url);
    const email = uniqueEmail('ada');
    const { data, response } = await browser.api.POST('/v1/user/register', {
      body: {
        email: email.toUpperCase(),
        password: PASSWORD,
        organization: '  Analytical Engines Ltd  ',
        first_name: 'Ada',
        last_name: 'Lovelace',
        country: 'GB',
      },
    });
    expect(response.status).toBe(201);
    expect(data).toMatchObject({
      authenticated: true,
      user: {
        email,
        name: 'Ada Lovelace',
        organization: 'Analytical Engines Ltd',
        role: { id: 4, name: 'super_admin' },
        requires_profile_completion: false,
      },
      session: { auth_method: 'password' },
    });

    const user = await app.db('users').whereRaw('lower(email) = ?', [email]).first();
    expect(user.password_hash).toMatch(/^\$argon2id\$v=19\$m=19456,t=2,p=1\$/);
    const organization = await app.db('organizations').where({ id: user.current_organization_id }).first();
    expect(organization).toMatchObject({ name: 'Analytical Engines Ltd', slug: expect.stringMatching(/^analytical-engines-ltd/), status: 'active' });
    expect(await app.db('memberships').where({ user_id: user.id }).select('organization_id', 'role')).toEqual([
      { organization_id: organization.id, role: 'super_admin' },
    ]);
    expect(await app.db('billing_accounts').where({ organization_id: organization.id }).first()).toMatchObject({
      status: 'active',
      billing_mode: 'postpaid',
      currency: 'usd',
      max_active_resources: 5,
    });
  });

  it('sets an HttpOnly session cookie and a readable csrf_token cookie bound to the session', async () => {
    const { response } = await register({ email: uniqueEmail(), password: PASSWORD, organization: 'Cookies Inc' });
    const cookies = response.headers.getSetCookie().map(parseSetCookie);
    const session = cookies.find((c) => c.name === 'session');
    const csrf = cookies.find((c) => c.name === 'csrf_token');
    expect(session?.attributes).toMatchObject({ httponly: true, path: '/', samesite: 'Lax' });
    expect(session?.attributes.secure).toBeUndefined();
    expect(session?.value).toMatch(/^[a-z2-7]{32}$/);
    expect(csrf?.attributes.httponly).toBeUndefined();
    expect(csrf?.value).toBe(app.container.cookies.csrfToken(hashToken(session?.value ?? '')));
    // Only the hash of the token is stored.
    expect(await app.db('sessions').where({ id: session?.value }).first()).toBeUndefined();
    expect(await app.db('sessions').where({ id: hashToken(session?.value ?? '') }).first()).toBeDefined();
  });

  it('refuses an email already registered, whatever its case, with 409 EMAIL_TAKEN', async () => {
    const { email } = await registeredUser(app);
    const { error, response } = await register({ email: email.toUpperCase(), password: PASSWORD, organization: 'Again' });
    expect(response.status).toBe(409);
    expect(error).toMatchObject({ code: 'EMAIL_TAKEN' });
    expect(await app.db('users').whereRaw('lower(email) = ?', [email]).count({ n: '*' })).toEqual([{ n: '1' }]);
  });

  it.each([
    ['a password of 7 bytes', 'abcdefg', 'body/password'],
    ['a password of 72 characters but more than 72 bytes is too long', '€'.repeat(25), 'body/password'],
  ])('refuses %s', async (_case, password, location) => {
    const { error, response } = await register({ email: uniqueEmail(), password, organization: 'Bytes' });
    expect(response.status).toBe(422);
    expect(error?.errors?.map((e) => e.location)).toContain(location);
  });

  it.each([
    ['a common password', () => 'password'],
    ['another common password, in capitals', () => 'QWERTY123'],
    ['the email itself', (email: string) => email.toUpperCase()],
    ['the part of the email before @', (email: string) => email.split('@')[0] ?? ''],
  ])('refuses %s with 422 VALIDATION_FAILED at body/password', async (_case, passwordFor) => {
    const email = uniqueEmail('guessable');
    const { error, response } = await register({ email, password: passwordFor(email), organization: 'Guessable' });
    expect(response.status).toBe(422);
    expect(error?.code).toBe('VALIDATION_FAILED');
    expect(error?.errors?.map((e) => e.location)).toEqual(['body/password']);
    expect(await app.db('users').whereRaw('lower(email) = ?', [email]).first()).toBeUndefined();
  });

  it.each(['aaaaaaaa', 'abcdefgh', 'zxcvbnmasdf', 'P@ssw0rd2024'])('refuses %s, on no list but easy to guess, with 422 and zxcvbn’s advice', async (password) => {
    const email = uniqueEmail('weak');
    const { error, response } = await register({ email, password, organization: 'Weak' });
    expect(response.status).toBe(422);
    expect(error).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ location: 'body/password', message: expect.stringMatching(/^is too easy to guess \(strength [0-2] of 4, at least 3 needed\)/) }] });
    expect(await app.db('users').whereRaw('lower(email) = ?', [email]).first()).toBeUndefined();
  });

  it('limits registrations to 100 per 15 minutes per client address with 429 RATE_LIMITED and Retry-After', async () => {
    const from = { 'x-forwarded-for': '203.0.113.10' };
    // Refused attempts count too: the limit is checked before anything else (and before any hashing).
    for (let i = 0; i < 100; i++) {
      expect(await statusOf(register({ email: uniqueEmail('flood'), password: 'password', organization: 'Flood' }, from))).toBe(422);
    }
    const email = uniqueEmail('flood');
    const limited = await register({ email, password: PASSWORD, organization: 'Flood' }, from);
    expect(limited.response.status).toBe(429);
    expect(limited.error).toMatchObject({ code: 'RATE_LIMITED' });
    expect(Number(limited.response.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await app.db('users').whereRaw('lower(email) = ?', [email]).first()).toBeUndefined();

    expect(await statusOf(register({ email, password: PASSWORD, organization: 'Flood' }, { 'x-forwarded-for': '203.0.113.11' }))).toBe(201);
  });

  it('accepts a password of exactly 72 bytes', async () => {
    expect(await statusOf(register({ email: uniqueEmail(), password: `${'€'.repeat(8)}correct horse battery staple, then a few more wo`, organization: 'Bytes' }))).toBe(201);
  });

  it.each([
    [{ organization: '   ' }, 'body/organization'],
    [{ organization: '' }, 'body/organization'],
    [{ email: 'no' }, 'body/email'],
    [{ role: 'admin' }, 'body/role'],
  ])('refuses %o with 422 VALIDATION_FAILED', async (change, location) => {
    const { error, response } = await register({ email: uniqueEmail(), password: PASSWORD, organization: 'Valid', ...change });
    expect(response.status).toBe(422);
    expect(error?.code).toBe('VALIDATION_FAILED');
    expect(error?.errors?.map((e) => e.location)).toContain(location);
  });

  it('refuses a request from an origin that is not allowed with 403 CSRF_FAILED', async () => {
    const browser = new Browser(app.url);
    browser.origin = 'https://evil.example';
    const { error, response } = await browser.api.POST('/v1/user/register', { body: { email: uniqueEmail(), password: PASSWORD, organization: 'Evil' } });
    expect(response.status).toBe(403);
    expect(error).toMatchObject({ code: 'CSRF_FAILED' });
  });
});

describe('sign-in', () => {
  it('starts a new session with a new token at every sign-in', async () => {
    const { email, browser: first } = await registeredUser(app);
    const second = new Browser(app.url);
    const { data, response } = await second.api.POST('/v1/user/signin', { body: { email: email.toUpperCase(), password: PASSWORD } });
    expect(response.status).toBe(200);
    expect(data).toMatchObject({ authenticated: true, user: { email, role: { name: 'super_admin' } }, session: { auth_method: 'password' } });
    expect(second.cookies.get('session')).not.toBe(first.cookies.get('session'));
    expect(await statusOf(first.api.GET('/v1/auth/session'))).toBe(200);
    expect(await statusOf(second.api.GET('/v1/auth/session'))).toBe(200);
  });

  it.each([
    ['a wrong password', async () => (await registeredUser(app)).email, 'wrong password!'],
    ['an unknown email', async () => uniqueEmail('nobody'), PASSWORD],
  ])('answers %s with 401 and the same message', async (_case, emailOf, password) => {
    const { error, response } = await new Browser(app.url).api.POST('/v1/user/signin', { body: { email: await emailOf(), password } });
    expect(response.status).toBe(401);
    expect(error).toMatchObject({ code: 'INVALID_CREDENTIALS', detail: 'Invalid email or password.' });
    expect(response.headers.getSetCookie()).toEqual([]);
  });
});

describe('the session', () => {
  it('answers the session response to the cookie holder', async () => {
    const { api, email, user } = await registeredUser(app);
    const { data, response } = await api.GET('/v1/auth/session');
    expect(response.status).toBe(200);
    expect(data).toMatchObject({ authenticated: true, user: { id: user.id, email } });
    expect(response.headers.getSetCookie()).toEqual([]);
  });

  it('answers 401 UNAUTHENTICATED without a cookie or with an unknown one', async () => {
    expect((await new Browser(app.url).api.GET('/v1/auth/session')).error).toMatchObject({ code: 'UNAUTHENTICATED' });
    const unknown = new Browser(app.url);
    unknown.cookies.set('session', 'abcdefghijklmnopqrstuvwxyz234567');
    expect(await statusOf(unknown.api.GET('/v1/auth/session'))).toBe(401);
  });

  it('refuses an Authorization header on a management route with 401 AUTHORIZATION_HEADER_NOT_ALLOWED', async () => {
    const { api } = await registeredUser(app);
    const { error, response } = await api.GET('/v1/auth/session', { headers: { authorization: 'Bearer svc-sk-abc' } });
    expect(response.status).toBe(401);
    expect(error).toMatchObject({ code: 'AUTHORIZATION_HEADER_NOT_ALLOWED' });
  });

  it('slides: a session with fewer than 15 days left is extended to 30 and its cookies re-sent', async () => {
    const { browser } = await registeredUser(app);
    const token = browser.cookies.get('session') ?? '';
    await ageSession(app, token, { expiresAt: new Date(Date.now() + 10 * 86_400_000) });
    const { data, response } = await browser.api.GET('/v1/auth/session');
    expect(response.status).toBe(200);
    expect(response.headers.getSetCookie().map((c) => parseSetCookie(c).name).sort()).toEqual(['csrf_token', 'session']);
    const { expires_at } = await app.db('sessions').where({ id: hashToken(token) }).first();
    expect(expires_at.getTime()).toBeGreaterThan(Date.now() + 29 * 86_400_000);
    expect(new Date(data?.session.expires_at ?? '').getTime()).toBe(expires_at.getTime());
  });

  it('ends at expiry: an expired session answers 401 and is deleted', async () => {
    const { browser } = await registeredUser(app);
    const token = browser.cookies.get('session') ?? '';
    await ageSession(app, token, { expiresAt: new Date(Date.now() - 1000) });
    expect(await statusOf(browser.api.GET('/v1/auth/session'))).toBe(401);
    expect(await app.db('sessions').where({ id: hashToken(token) }).first()).toBeUndefined();
  });
});

describe('CSRF protection on cookie-authenticated writes', () => {
  it('refuses a write without the X-CSRF-Token header with 403 CSRF_FAILED', async () => {
    const { browser } = await registeredUser(app);
    browser.sendCsrfHeader = false;
    const { error, response } = await browser.api.PATCH('/v1/user/profile', { body: { name: 'Mallory' } });
    expect(response.status).toBe(403);
    expect(error).toMatchObject({ code: 'CSRF_FAILED' });
  });

  it('refuses a header that is not the token of this session', async () => {
    const { api } = await registeredUser(app);
    const other = await registeredUser(app);
    const forged = { 'x-csrf-token': other.browser.cookies.get('csrf_token') ?? '' };
    expect(await statusOf(api.PATCH('/v1/user/profile', { body: { name: 'Mallory' }, headers: forged }))).toBe(403);
  });

  it('refuses a write from an origin that is not allowed, even with the token', async () => {
    const { browser } = await registeredUser(app);
    browser.origin = 'https://evil.example';
    expect(await statusOf(browser.api.PATCH('/v1/user/profile', { body: { name: 'Mallory' } }))).toBe(403);
  });

  it('accepts the write with the token and an allowed origin', async () => {
    const { api } = await registeredUser(app);
    expect(await statusOf(api.PATCH('/v1/user/profile', { body: { name: 'Grace' } }))).toBe(200);
  });
});

describe('profile', () => {
  it('updates fields, clears optional ones with null, and answers the refreshed session', async () => {
    const { api, user } = await registeredUser(app, { first_name: 'Ada', country: 'GB' });
    const { data, response } = await api.PATCH('/v1/user/profile', { body: { name: 'Countess of Lovelace', country: null, contact_number: '+44 20 7946 0958' } });
    expect(response.status).toBe(200);
    expect(data).toMatchObject({ user: { name: 'Countess of Lovelace' } });
    expect(await app.db('users').where({ id: user.id }).first('name', 'first_name', 'country', 'contact_number')).toEqual({
      name: 'Countess of Lovelace',
      first_name: 'Ada',
      country: null,
      contact_number: '+44 20 7946 0958',
    });
  });

  it('refuses an organization when the user already has one', async () => {
    const { api } = await registeredUser(app);
    const { error, response } = await api.PATCH('/v1/user/profile', { body: { organization: 'Second' } });
    expect(response.status).toBe(422);
    expect(error?.errors).toEqual([{ location: 'body/organization', message: expect.stringContaining('PATCH /v1/organization') }]);
  });

  it('refuses unknown fields, such as email', async () => {
    const { api } = await registeredUser(app);
    expect(await statusOf(api.PATCH('/v1/user/profile', { body: unchecked({ email: 'new@example.com' }) }))).toBe(422);
  });
});

describe('sign-out', () => {
  it('ends the session server-side and clears both cookies', async () => {
    const { browser } = await registeredUser(app);
    const token = browser.cookies.get('session') ?? '';
    const { data, response } = await browser.api.POST('/v1/user/logout');
    expect(response.status).toBe(200);
    expect(data).toEqual({ authenticated: false });
    const cleared = response.headers.getSetCookie().map(parseSetCookie);
    expect(cleared.map((c) => [c.name, c.value])).toEqual([
      ['session', ''],
      ['csrf_token', ''],
    ]);
    expect(await app.db('sessions').where({ id: hashToken(token) }).first()).toBeUndefined();
    const replay = new Browser(app.url);
    replay.cookies.set('session', token);
    expect(await statusOf(replay.api.GET('/v1/auth/session'))).toBe(401);
  });
});

