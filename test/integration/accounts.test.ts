import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken } from '../../src/crypto.ts';
import { PASSWORD, registeredUser, uniqueEmail } from '../factories/accounts.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser, parseSetCookie } from '../helpers/browser.ts';
import { jsonOf, type Problem } from '../helpers/http.ts';

let app: TestApp;
beforeAll(async () => {
  // Behind a trusted proxy, so a test can speak from a client address of its own (X-Forwarded-For).
  app = await startTestApp({ TRUST_PROXY: 'true' });
});
afterAll(() => app.close());

const problemOf = (response: Response) => jsonOf<Problem>(response);

describe('registration', () => {
  it('creates the user, their organization, super_admin membership and billing account, and signs them in', async () => {
    const browser = new Browser(app.url);
    const email = uniqueEmail('ada');
    const response = await browser.post('/v1/user/register', {
      email: email.toUpperCase(),
      password: PASSWORD,
      organization: '  Analytical Engines Ltd  ',
      first_name: 'Ada',
      last_name: 'Lovelace',
      country: 'GB',
    });
    expect(response.status).toBe(201);
    const body = await jsonOf(response);
    expect(body).toMatchObject({
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
    const response = await fetch(`${app.url}/v1/user/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: uniqueEmail(), password: PASSWORD, organization: 'Cookies Inc' }),
    });
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
    const response = await new Browser(app.url).post('/v1/user/register', { email: email.toUpperCase(), password: PASSWORD, organization: 'Again' });
    expect(response.status).toBe(409);
    expect(await problemOf(response)).toMatchObject({ code: 'EMAIL_TAKEN' });
    expect(await app.db('users').whereRaw('lower(email) = ?', [email]).count({ n: '*' })).toEqual([{ n: '1' }]);
  });

  it.each([
    ['a password of 7 bytes', 'abcdefg', 'body/password'],
    ['a password of 72 characters but more than 72 bytes is too long', '€'.repeat(25), 'body/password'],
  ])('refuses %s', async (_case, password, location) => {
    const response = await new Browser(app.url).post('/v1/user/register', { email: uniqueEmail(), password, organization: 'Bytes' });
    expect(response.status).toBe(422);
    expect((await problemOf(response)).errors?.map((e) => e.location)).toContain(location);
  });

  it.each([
    ['a common password', () => 'password'],
    ['another common password, in capitals', () => 'QWERTY123'],
    ['the email itself', (email: string) => email.toUpperCase()],
    ['the part of the email before @', (email: string) => email.split('@')[0] ?? ''],
  ])('refuses %s with 422 VALIDATION_FAILED at body/password', async (_case, passwordFor) => {
    const email = uniqueEmail('guessable');
    const response = await new Browser(app.url).post('/v1/user/register', { email, password: passwordFor(email), organization: 'Guessable' });
    expect(response.status).toBe(422);
    const problem = await problemOf(response);
    expect(problem.code).toBe('VALIDATION_FAILED');
    expect(problem.errors?.map((e) => e.location)).toEqual(['body/password']);
    expect(await app.db('users').whereRaw('lower(email) = ?', [email]).first()).toBeUndefined();
  });

  it('limits registrations to 100 per 15 minutes per client address with 429 RATE_LIMITED and Retry-After', async () => {
    const from = { 'x-forwarded-for': '203.0.113.10' };
    // Refused attempts count too: the limit is checked before anything else (and before any hashing).
    for (let i = 0; i < 100; i++) {
      const refused = await new Browser(app.url).post('/v1/user/register', { email: uniqueEmail('flood'), password: 'password', organization: 'Flood' }, from);
      expect(refused.status).toBe(422);
    }
    const email = uniqueEmail('flood');
    const limited = await new Browser(app.url).post('/v1/user/register', { email, password: PASSWORD, organization: 'Flood' }, from);
    expect(limited.status).toBe(429);
    expect(await problemOf(limited)).toMatchObject({ code: 'RATE_LIMITED' });
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await app.db('users').whereRaw('lower(email) = ?', [email]).first()).toBeUndefined();

    const elsewhere = await new Browser(app.url).post('/v1/user/register', { email, password: PASSWORD, organization: 'Flood' }, { 'x-forwarded-for': '203.0.113.11' });
    expect(elsewhere.status).toBe(201);
  });

  it('accepts a password of exactly 72 bytes', async () => {
    const response = await new Browser(app.url).post('/v1/user/register', { email: uniqueEmail(), password: `${'€'.repeat(24)}`, organization: 'Bytes' });
    expect(response.status).toBe(201);
  });

  it.each([
    [{ organization: '   ' }, 'body/organization'],
    [{ organization: '' }, 'body/organization'],
    [{ email: 'no' }, 'body/email'],
    [{ role: 'admin' }, 'body/role'],
  ])('refuses %o with 422 VALIDATION_FAILED', async (change, location) => {
    const response = await new Browser(app.url).post('/v1/user/register', { email: uniqueEmail(), password: PASSWORD, organization: 'Valid', ...change });
    expect(response.status).toBe(422);
    const problem = await problemOf(response);
    expect(problem.code).toBe('VALIDATION_FAILED');
    expect(problem.errors?.map((e) => e.location)).toContain(location);
  });

  it('refuses a request from an origin that is not allowed with 403 CSRF_FAILED', async () => {
    const browser = new Browser(app.url);
    browser.origin = 'https://evil.example';
    const response = await browser.post('/v1/user/register', { email: uniqueEmail(), password: PASSWORD, organization: 'Evil' });
    expect(response.status).toBe(403);
    expect(await problemOf(response)).toMatchObject({ code: 'CSRF_FAILED' });
  });
});

describe('sign-in', () => {
  it('starts a new session with a new token at every sign-in', async () => {
    const { email, browser: first } = await registeredUser(app);
    const second = new Browser(app.url);
    const response = await second.post('/v1/user/signin', { email: email.toUpperCase(), password: PASSWORD });
    expect(response.status).toBe(200);
    expect(await jsonOf(response)).toMatchObject({ authenticated: true, user: { email, role: { name: 'super_admin' } }, session: { auth_method: 'password' } });
    expect(second.cookies.get('session')).not.toBe(first.cookies.get('session'));
    expect((await first.get('/v1/auth/session')).status).toBe(200);
    expect((await second.get('/v1/auth/session')).status).toBe(200);
  });

  it.each([
    ['a wrong password', async () => (await registeredUser(app)).email, 'wrong password!'],
    ['an unknown email', async () => uniqueEmail('nobody'), PASSWORD],
  ])('answers %s with 401 and the same message', async (_case, emailOf, password) => {
    const response = await new Browser(app.url).post('/v1/user/signin', { email: await emailOf(), password });
    expect(response.status).toBe(401);
    expect(await problemOf(response)).toMatchObject({ code: 'INVALID_CREDENTIALS', detail: 'Invalid email or password.' });
    expect(response.headers.getSetCookie()).toEqual([]);
  });
});

describe('the session', () => {
  it('answers the session response to the cookie holder', async () => {
    const { browser, email, user } = await registeredUser(app);
    const response = await browser.get('/v1/auth/session');
    expect(response.status).toBe(200);
    expect(await jsonOf(response)).toMatchObject({ authenticated: true, user: { id: user.id, email } });
    expect(response.headers.getSetCookie()).toEqual([]);
  });

  it('answers 401 UNAUTHENTICATED without a cookie or with an unknown one', async () => {
    expect(await problemOf(await fetch(`${app.url}/v1/auth/session`))).toMatchObject({ code: 'UNAUTHENTICATED' });
    const response = await fetch(`${app.url}/v1/auth/session`, { headers: { cookie: 'session=abcdefghijklmnopqrstuvwxyz234567' } });
    expect(response.status).toBe(401);
  });

  it('refuses an Authorization header on a management route with 401 AUTHORIZATION_HEADER_NOT_ALLOWED', async () => {
    const { browser } = await registeredUser(app);
    const response = await browser.get('/v1/auth/session', { authorization: 'Bearer svc-sk-abc' });
    expect(response.status).toBe(401);
    expect(await problemOf(response)).toMatchObject({ code: 'AUTHORIZATION_HEADER_NOT_ALLOWED' });
  });

  it('slides: a session with fewer than 15 days left is extended to 30 and its cookies re-sent', async () => {
    const { browser } = await registeredUser(app);
    const id = hashToken(browser.cookies.get('session') ?? '');
    const tenDays = new Date(Date.now() + 10 * 86_400_000);
    await app.db('sessions').where({ id }).update({ expires_at: tenDays });
    const response = await browser.get('/v1/auth/session');
    expect(response.status).toBe(200);
    expect(response.headers.getSetCookie().map((c) => parseSetCookie(c).name).sort()).toEqual(['csrf_token', 'session']);
    const { expires_at } = await app.db('sessions').where({ id }).first();
    expect(expires_at.getTime()).toBeGreaterThan(Date.now() + 29 * 86_400_000);
    expect(new Date(((await jsonOf<{ session: { expires_at: string } }>(response)).session.expires_at)).getTime()).toBe(expires_at.getTime());
  });

  it('ends at expiry: an expired session answers 401 and is deleted', async () => {
    const { browser } = await registeredUser(app);
    const id = hashToken(browser.cookies.get('session') ?? '');
    await app.db('sessions').where({ id }).update({ expires_at: new Date(Date.now() - 1000) });
    expect((await browser.get('/v1/auth/session')).status).toBe(401);
    expect(await app.db('sessions').where({ id }).first()).toBeUndefined();
  });
});

describe('CSRF protection on cookie-authenticated writes', () => {
  it('refuses a write without the X-CSRF-Token header with 403 CSRF_FAILED', async () => {
    const { browser } = await registeredUser(app);
    browser.sendCsrfHeader = false;
    const response = await browser.patch('/v1/user/profile', { name: 'Mallory' });
    expect(response.status).toBe(403);
    expect(await problemOf(response)).toMatchObject({ code: 'CSRF_FAILED' });
  });

  it('refuses a header that is not the token of this session', async () => {
    const { browser } = await registeredUser(app);
    const other = await registeredUser(app);
    const response = await browser.patch('/v1/user/profile', { name: 'Mallory' }, { 'x-csrf-token': other.browser.cookies.get('csrf_token') ?? '' });
    expect(response.status).toBe(403);
  });

  it('refuses a write from an origin that is not allowed, even with the token', async () => {
    const { browser } = await registeredUser(app);
    browser.origin = 'https://evil.example';
    expect((await browser.patch('/v1/user/profile', { name: 'Mallory' })).status).toBe(403);
  });

  it('accepts the write with the token and an allowed origin', async () => {
    const { browser } = await registeredUser(app);
    expect((await browser.patch('/v1/user/profile', { name: 'Grace' })).status).toBe(200);
  });
});

describe('profile', () => {
  it('updates fields, clears optional ones with null, and answers the refreshed session', async () => {
    const { browser, user } = await registeredUser(app, { first_name: 'Ada', country: 'GB' });
    const response = await browser.patch('/v1/user/profile', { name: 'Countess of Lovelace', country: null, contact_number: '+44 20 7946 0958' });
    expect(response.status).toBe(200);
    expect(await jsonOf(response)).toMatchObject({ user: { name: 'Countess of Lovelace' } });
    expect(await app.db('users').where({ id: user.id }).first('name', 'first_name', 'country', 'contact_number')).toEqual({
      name: 'Countess of Lovelace',
      first_name: 'Ada',
      country: null,
      contact_number: '+44 20 7946 0958',
    });
  });

  it('refuses an organization when the user already has one', async () => {
    const { browser } = await registeredUser(app);
    const response = await browser.patch('/v1/user/profile', { organization: 'Second' });
    expect(response.status).toBe(422);
    expect((await problemOf(response)).errors).toEqual([{ location: 'body/organization', message: expect.stringContaining('PATCH /v1/organization') }]);
  });

  it('refuses unknown fields, such as email', async () => {
    const { browser } = await registeredUser(app);
    expect((await browser.patch('/v1/user/profile', { email: 'new@example.com' })).status).toBe(422);
  });
});

describe('sign-out', () => {
  it('ends the session server-side and clears both cookies', async () => {
    const { browser } = await registeredUser(app);
    const token = browser.cookies.get('session') ?? '';
    const response = await browser.post('/v1/user/logout');
    expect(response.status).toBe(200);
    expect(await jsonOf(response)).toEqual({ authenticated: false });
    const cleared = response.headers.getSetCookie().map(parseSetCookie);
    expect(cleared.map((c) => [c.name, c.value])).toEqual([
      ['session', ''],
      ['csrf_token', ''],
    ]);
    expect(await app.db('sessions').where({ id: hashToken(token) }).first()).toBeUndefined();
    const replay = await fetch(`${app.url}/v1/auth/session`, { headers: { cookie: `session=${token}` } });
    expect(replay.status).toBe(401);
  });
});
