import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken } from '../../src/crypto.ts';
import { PASSWORD, registeredUser, uniqueEmail, verifiedUser } from '../factories/accounts.ts';
import { APP_ORIGIN, startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser, parseSetCookie } from '../helpers/browser.ts';
import { jsonOf, type Problem } from '../helpers/http.ts';
import { TestIdentityProvider, type IdpAccount } from '../helpers/oidc-provider.ts';
import { RedirectBrowser } from '../helpers/redirect-browser.ts';

const WEB_APP = 'https://app.example.com';
const CALLBACK = `${APP_ORIGIN}/v1/sso/callback/testidp`;

let idp: TestIdentityProvider;
let app: TestApp;
beforeAll(async () => {
  idp = await new TestIdentityProvider(CALLBACK).start();
  app = await startTestApp({ ...idp.env, OIDC_PROVIDER_NAME: 'testidp', WEB_APP_URL: WEB_APP }, { workers: true });
});
afterAll(async () => {
  await app?.close();
  await idp?.stop();
});

type Session = { user: { id: number; email: string; name: string; organization: string; role: { name: string }; requires_profile_completion: boolean; email_verified: boolean }; session: { auth_method: string } };

const problemOf = (response: Response) => jsonOf<Problem>(response);

function idpAccount(overrides: Partial<IdpAccount> = {}): IdpAccount {
  return { sub: randomUUID(), email: uniqueEmail('sso'), email_verified: true, name: 'Grace Hopper', ...overrides };
}

/** A browser with no cookies anywhere, that reaches the service where its PUBLIC_URL points. */
function freshBrowser(): RedirectBrowser {
  return new RedirectBrowser({ [APP_ORIGIN]: app.url });
}

/** Signs `account` in through the whole redirect flow; returns the browser and the final redirect. */
async function signInWithIdp(account: IdpAccount, loginPath = '/v1/sso/login/testidp') {
  idp.signInAs(account);
  const browser = freshBrowser();
  const navigation = await browser.navigate(`${APP_ORIGIN}${loginPath}`);
  return { browser, ...navigation };
}

/** The session the browser's cookies hold, as GET /v1/auth/session answers it. */
async function sessionOf(browser: RedirectBrowser): Promise<Session> {
  const response = await browser.request('GET', `${APP_ORIGIN}/v1/auth/session`);
  expect(response.status).toBe(200);
  return jsonOf<Session>(response);
}

/** Runs the flow up to the provider's redirect back to the callback, without following it. */
async function untilCallback(account: IdpAccount) {
  idp.signInAs(account);
  const browser = freshBrowser();
  const navigation = await browser.navigate(`${APP_ORIGIN}/v1/sso/login/testidp`, { stopBefore: (url) => url.href.startsWith(CALLBACK) });
  expect(navigation.location).toMatch(new RegExp(`^${CALLBACK}\\?`));
  return { browser, callback: new URL(navigation.location ?? '') };
}

describe('GET /v1/sso/providers', () => {
  it('lists the configured provider with its login URL', async () => {
    const response = await fetch(`${app.url}/v1/sso/providers`);
    expect(response.status).toBe(200);
    expect(await jsonOf(response)).toEqual({
      providers: [{ name: 'testidp', display_name: 'Testidp', configured: true, login_url: `${APP_ORIGIN}/v1/sso/login/testidp` }],
    });
  });
});

describe('GET /v1/sso/login/{provider}', () => {
  it('redirects to the provider with PKCE S256, state, nonce and scope, and sets the sso_state cookie', async () => {
    const response = await fetch(`${app.url}/v1/sso/login/testidp?return_to=/deployments`, { redirect: 'manual' });
    expect(response.status).toBe(302);
    const location = new URL(response.headers.get('location') ?? '');
    expect(location.origin).toBe(idp.issuer);
    const query = Object.fromEntries(location.searchParams);
    expect(query).toMatchObject({
      client_id: idp.clientId,
      redirect_uri: CALLBACK,
      response_type: 'code',
      scope: 'openid email profile',
      code_challenge_method: 'S256',
      state: expect.stringMatching(/^[\w-]{43}$/),
      nonce: expect.stringMatching(/^[\w-]{43}$/),
      code_challenge: expect.stringMatching(/^[\w-]{43}$/),
    });
    const cookies = response.headers.getSetCookie().map(parseSetCookie);
    expect(cookies.map((c) => c.name)).toEqual(['sso_state']);
    expect(cookies[0]?.attributes).toMatchObject({ path: '/v1/sso', 'max-age': '600', httponly: true, samesite: 'Lax' });
    expect(cookies[0]?.attributes.secure).toBeUndefined();
    // Sealed: nothing of the attempt can be read from the cookie.
    expect(cookies[0]?.value).not.toContain(query.state);
    expect(decodeURIComponent(cookies[0]?.value ?? '')).not.toContain('/deployments');
  });

  it.each(['//evil.example', '/\\evil.example', 'https://evil.example', 'deployments'])('refuses return_to %s with 422 VALIDATION_FAILED', async (returnTo) => {
    const response = await fetch(`${app.url}/v1/sso/login/testidp?return_to=${encodeURIComponent(returnTo)}`, { redirect: 'manual' });
    expect(response.status).toBe(422);
    const problem = await problemOf(response);
    expect(problem.code).toBe('VALIDATION_FAILED');
    expect(problem.errors?.map((e) => e.location)).toEqual(['query/return_to']);
    expect(response.headers.getSetCookie()).toEqual([]);
  });

  it('answers 404 NOT_FOUND for a provider name the server does not have', async () => {
    for (const path of ['/v1/sso/login/google', '/v1/sso/callback/google?code=abc&state=def']) {
      const response = await fetch(`${app.url}${path}`, { redirect: 'manual' });
      expect(response.status).toBe(404);
      expect(await problemOf(response)).toMatchObject({ code: 'NOT_FOUND' });
    }
  });
});

describe('signing in through the provider', () => {
  it('creates a new user without an organization, who completes the profile with PATCH /v1/user/profile', async () => {
    const account = idpAccount({ name: 'Grace Hopper' });
    const { browser, response, location, visited } = await signInWithIdp(account, `/v1/sso/login/testidp?return_to=${encodeURIComponent('/deployments?view=all&ids=1,2')}`);

    expect(visited.some((url) => url.startsWith(`${idp.issuer}/interaction/`))).toBe(true);
    expect(response.status).toBe(302);
    expect(location).toBe(`${WEB_APP}/deployments?view=all&ids=1,2`);
    const setCookies = response.headers.getSetCookie().map(parseSetCookie);
    expect(setCookies.find((c) => c.name === 'sso_state')?.value).toBe('');
    expect(setCookies.find((c) => c.name === 'session')?.attributes).toMatchObject({ httponly: true, path: '/' });
    expect(browser.cookie(`${APP_ORIGIN}/v1/sso/callback/testidp`, 'sso_state')).toBeUndefined();

    const session = await sessionOf(browser);
    expect(session).toMatchObject({
      user: { email: account.email, name: 'Grace Hopper', organization: '', requires_profile_completion: true, email_verified: true },
      session: { auth_method: 'testidp' },
    });
    const user = await app.db('users').where({ id: session.user.id }).first();
    expect(user).toMatchObject({ password_hash: null, current_organization_id: null });
    expect(await app.db('user_identities').where({ user_id: user.id }).select('provider', 'subject', 'email')).toEqual([
      { provider: 'testidp', subject: account.sub, email: account.email },
    ]);

    const csrf = browser.cookie(`${APP_ORIGIN}/`, 'csrf_token') ?? '';
    expect(csrf).not.toBe('');
    const completed = await browser.request('PATCH', `${APP_ORIGIN}/v1/user/profile`, {
      headers: { origin: WEB_APP, 'x-csrf-token': csrf },
      body: { organization: 'Navy Labs' },
    });
    expect(completed.status).toBe(200);
    expect(await jsonOf(completed)).toMatchObject({
      user: { id: user.id, organization: 'Navy Labs', role: { name: 'super_admin' }, requires_profile_completion: false },
      session: { auth_method: 'testidp' },
    });
  });

  it('links an existing account whose email is verified, whatever its case, and ends its other sessions', async () => {
    const { email, user, browser: registration } = await verifiedUser(app);
    const account = idpAccount({ email: email.toUpperCase() });
    const { browser, location } = await signInWithIdp(account);

    expect(location).toBe(`${WEB_APP}/`);
    const session = await sessionOf(browser);
    expect(session.user).toMatchObject({
      id: user.id,
      email,
      organization: `Org of ${email}`,
      role: { name: 'super_admin' },
      requires_profile_completion: false,
      email_verified: true,
    });
    expect(session.session.auth_method).toBe('testidp');
    expect(await app.db('user_identities').where({ subject: account.sub }).select('user_id', 'email')).toEqual([{ user_id: user.id, email }]);
    // Linking ended the account's other sessions; the password (the owner's own) still works.
    expect((await registration.get('/v1/auth/session')).status).toBe(401);
    expect((await new Browser(app.url).post('/v1/user/signin', { email, password: PASSWORD })).status).toBe(200);
  });

  it('finds a returning user by subject, even when the provider now reports another email', async () => {
    const account = idpAccount();
    const first = await sessionOf((await signInWithIdp(account)).browser);
    const newEmail = uniqueEmail('renamed');
    const second = await sessionOf((await signInWithIdp({ ...account, email: newEmail })).browser);

    expect(second.user.id).toBe(first.user.id);
    expect(await app.db('users').whereRaw('lower(email) = ?', [newEmail]).first()).toBeUndefined();
    expect(await app.db('user_identities').where({ subject: account.sub }).select('user_id', 'email')).toEqual([{ user_id: first.user.id, email: newEmail }]);
    expect(await app.db('sessions').where({ user_id: first.user.id, auth_method: 'testidp' }).count({ n: '*' })).toEqual([{ n: '2' }]);
  });

  it('refuses an email the provider has not verified with 400 SSO_FAILED, creating and linking nothing', async () => {
    const { email, user } = await registeredUser(app);
    const { response } = await signInWithIdp(idpAccount({ email, email_verified: false }));

    expect(response.status).toBe(400);
    expect(await problemOf(response)).toMatchObject({ code: 'SSO_FAILED', detail: expect.stringContaining('verified email') });
    expect(response.headers.getSetCookie().map((c) => parseSetCookie(c).name)).toEqual(['sso_state']);
    expect(await app.db('user_identities').where({ user_id: user.id }).first()).toBeUndefined();
    expect(await app.db('users').whereRaw('lower(email) = ?', [email]).count({ n: '*' })).toEqual([{ n: '1' }]);
  });

  it('answers 400 SSO_FAILED repeating the provider error when the user declines', async () => {
    idp.denyNext();
    const browser = freshBrowser();
    const { response, visited } = await browser.navigate(`${APP_ORIGIN}/v1/sso/login/testidp`);

    expect(new URL(visited.at(-1) ?? '').searchParams.get('error')).toBe('access_denied');
    expect(response.status).toBe(400);
    expect(await problemOf(response)).toMatchObject({ code: 'SSO_FAILED', detail: expect.stringContaining('access_denied') });
    expect(browser.cookie(`${APP_ORIGIN}/`, 'session')).toBeUndefined();
  });
});

describe('the callback refuses what does not belong to this browser’s attempt', () => {
  it('refuses a tampered sso_state cookie with 400 SSO_FAILED', async () => {
    const { browser, callback } = await untilCallback(idpAccount());
    const sealed = browser.cookie(callback.href, 'sso_state') ?? '';
    const tampered = `${sealed.slice(0, -2)}${sealed.endsWith('AA') ? 'BB' : 'AA'}`;
    browser.setCookie(callback.href, 'sso_state', tampered, '/v1/sso');

    const { response } = await browser.navigate(callback.href);
    expect(response.status).toBe(400);
    expect(await problemOf(response)).toMatchObject({ code: 'SSO_FAILED', detail: expect.stringContaining('sso_state') });
    expect(browser.cookie(`${APP_ORIGIN}/`, 'session')).toBeUndefined();
  });

  it('refuses a callback without the sso_state cookie with 400 SSO_FAILED', async () => {
    const { browser, callback } = await untilCallback(idpAccount());
    browser.setCookie(callback.href, 'sso_state', undefined, '/v1/sso');

    const { response } = await browser.navigate(callback.href);
    expect(response.status).toBe(400);
    expect(await problemOf(response)).toMatchObject({ code: 'SSO_FAILED' });
  });

  it('refuses a state that is not the cookie’s with 400 SSO_FAILED', async () => {
    const { browser, callback } = await untilCallback(idpAccount());
    callback.searchParams.set('state', 'not-the-state-of-this-attempt');

    const { response } = await browser.navigate(callback.href);
    expect(response.status).toBe(400);
    expect(await problemOf(response)).toMatchObject({ code: 'SSO_FAILED', detail: expect.stringContaining('state') });
  });

  it('refuses the answer to an earlier attempt once the browser started another', async () => {
    const { browser, callback } = await untilCallback(idpAccount());
    expect((await browser.request('GET', `${APP_ORIGIN}/v1/sso/login/testidp`)).status).toBe(302);

    const { response } = await browser.navigate(callback.href);
    expect(response.status).toBe(400);
    expect(await problemOf(response)).toMatchObject({ code: 'SSO_FAILED' });
  });

  it('refuses a replayed code: the provider does not exchange it twice', async () => {
    const { browser, callback } = await untilCallback(idpAccount());
    const sealed = browser.cookie(callback.href, 'sso_state') ?? '';
    expect((await browser.navigate(callback.href)).response.status).toBe(302);

    browser.setCookie(callback.href, 'sso_state', sealed, '/v1/sso');
    const { response } = await browser.navigate(callback.href);
    expect(response.status).toBe(400);
    expect(await problemOf(response)).toMatchObject({ code: 'SSO_FAILED', detail: expect.stringContaining('invalid_grant') });
  });

  it('refuses an issuer that is not the configured one with 400 SSO_FAILED', async () => {
    const { browser, callback } = await untilCallback(idpAccount());
    callback.searchParams.set('iss', 'https://evil.example');

    const { response } = await browser.navigate(callback.href);
    expect(response.status).toBe(400);
    expect(await problemOf(response)).toMatchObject({ code: 'SSO_FAILED' });
  });

  it('refuses a callback without code or state with 400 SSO_FAILED', async () => {
    const { browser, callback } = await untilCallback(idpAccount());
    callback.searchParams.delete('code');

    const { response } = await browser.navigate(callback.href);
    expect(response.status).toBe(400);
    expect(await problemOf(response)).toMatchObject({ code: 'SSO_FAILED', detail: expect.stringContaining('`code`') });
  });
});

describe('a server without OIDC settings', () => {
  let bare: TestApp;
  beforeAll(async () => {
    bare = await startTestApp();
  });
  afterAll(() => bare?.close());

  it('lists its provider as not configured, with no login URL', async () => {
    const response = await fetch(`${bare.url}/v1/sso/providers`);
    expect(response.status).toBe(200);
    expect(await jsonOf(response)).toEqual({ providers: [{ name: 'google', display_name: 'Google', configured: false, login_url: null }] });
  });

  it('answers 404 SSO_NOT_CONFIGURED on its login and callback routes', async () => {
    for (const path of ['/v1/sso/login/google', '/v1/sso/callback/google?code=abc&state=def']) {
      const response = await fetch(`${bare.url}${path}`, { redirect: 'manual' });
      expect(response.status).toBe(404);
      expect(await problemOf(response)).toMatchObject({ code: 'SSO_NOT_CONFIGURED' });
    }
  });
});

describe('SSO on behalf of an invitation', () => {
  /** Starts SSO for an invitation through the API, then follows the provider's redirects. */
  async function acceptWithSso(token: string, account: IdpAccount) {
    idp.signInAs(account);
    const browser = freshBrowser();
    const started = await browser.request('POST', `${APP_ORIGIN}/v1/invitations/sso/testidp/start`, { body: { token } });
    expect(started.status).toBe(200);
    const { authorization_url } = await jsonOf<{ authorization_url: string }>(started);
    expect(new URL(authorization_url).origin).toBe(idp.issuer);
    const navigation = await browser.navigate(authorization_url);
    return { browser, landing: new URL(navigation.location ?? '') };
  }

  async function invitationFor(email: string) {
    const owner = await registeredUser(app, { organization: 'SSO Inviters' });
    const created = await owner.browser.post('/v1/organization/invitations', { email, role: 'member' });
    expect(created.status).toBe(201);
    const message = await app.inbox.next(email);
    return { owner, token: /\/invitations\/([a-z2-7]+)/.exec(message.text)?.[1] ?? '' };
  }

  it('signs the invitee in, creates their account without an organization of its own, and accepts', async () => {
    const account = idpAccount();
    const { owner, token } = await invitationFor(account.email);
    const { browser, landing } = await acceptWithSso(token, account);
    expect(landing.origin + landing.pathname).toBe(`${WEB_APP}/`);
    expect(landing.searchParams.get('invitation')).toBe('accepted');
    expect(await sessionOf(browser)).toMatchObject({
      user: { email: account.email, organization: 'SSO Inviters', role: { name: 'member' }, requires_profile_completion: false },
      session: { auth_method: 'testidp' },
    });
    const members = await jsonOf<Array<{ email: string }>>(await owner.browser.get('/v1/organization/members'));
    expect(members.map((m) => m.email)).toContain(account.email);
  });

  it('signs in but leaves the invitation pending when the verified email is not the invitee’s', async () => {
    const { owner, token } = await invitationFor(uniqueEmail('invitee'));
    const { browser, landing } = await acceptWithSso(token, idpAccount());
    expect(landing.searchParams.get('invitation_error')).toBe('INVITATION_EMAIL_MISMATCH');
    expect((await sessionOf(browser)).user.requires_profile_completion).toBe(true);
    const invitations = await jsonOf<Array<{ status: string }>>(await owner.browser.get('/v1/organization/invitations'));
    expect(invitations[0]?.status).toBe('pending');
  });

  it('refuses to start for an unknown, used or expired token', async () => {
    const unknown = await new Browser(app.url).post('/v1/invitations/sso/testidp/start', { token: 'nosuchtoken' });
    expect(unknown.status).toBe(404);
    expect((await problemOf(unknown)).code).toBe('INVITATION_NOT_FOUND');

    const { token } = await invitationFor(uniqueEmail('late'));
    await app.db('invitations').where({ token_hash: hashToken(token) }).update({ expires_at: new Date(Date.now() - 1000) });
    const expired = await new Browser(app.url).post('/v1/invitations/sso/testidp/start', { token });
    expect(expired.status).toBe(410);
  });

  it('answers 404 NOT_FOUND for a provider the server does not have', async () => {
    const { token } = await invitationFor(uniqueEmail('other'));
    const response = await new Browser(app.url).post('/v1/invitations/sso/nope/start', { token });
    expect(response.status).toBe(404);
    expect((await problemOf(response)).code).toBe('NOT_FOUND');
  });
});

describe('linking an identity to an existing account (email ownership)', () => {
  /** A RedirectBrowser signed in to a new password account (email unverified), as the web app would be. */
  async function registeredRedirectBrowser(email = uniqueEmail('linker')) {
    const browser = freshBrowser();
    const response = await browser.request('POST', `${APP_ORIGIN}/v1/user/register`, {
      headers: { origin: APP_ORIGIN },
      body: { email, password: PASSWORD, organization: `Org of ${email}` },
    });
    expect(response.status).toBe(201);
    const { user } = await jsonOf<Session>(response);
    return { browser, email, user };
  }

  it('refuses to link an account whose email nobody verified with 409 SSO_LINK_REQUIRES_SIGN_IN (pre-hijack)', async () => {
    // The squatter registers the victim's address with a password of their own, and stays signed in.
    const squatter = await registeredUser(app, { email: uniqueEmail('victim') });
    const victim = idpAccount({ email: squatter.email });

    for (let attempt = 0; attempt < 2; attempt++) {
      const { browser, response } = await signInWithIdp(victim);
      expect(response.status).toBe(409);
      expect(await problemOf(response)).toMatchObject({ code: 'SSO_LINK_REQUIRES_SIGN_IN', detail: expect.stringContaining('Sign in with your password first') });
      expect(browser.cookie(`${APP_ORIGIN}/`, 'session')).toBeUndefined();
    }
    // Nothing of the victim's identity reached the squatter's account, and no second account exists.
    expect(await app.db('user_identities').where({ subject: victim.sub }).first()).toBeUndefined();
    expect(await app.db('user_identities').where({ user_id: squatter.user.id }).first()).toBeUndefined();
    expect(await app.db('users').whereRaw('lower(email) = ?', [squatter.email]).count({ n: '*' })).toEqual([{ n: '1' }]);
    expect(await jsonOf(await squatter.browser.get('/v1/auth/session'))).toMatchObject({ user: { id: squatter.user.id, email_verified: false } });
  });

  it('lets the owner of the mailbox take the address back with a reset, after which SSO links and the squatter is out', async () => {
    const squatter = await registeredUser(app, { email: uniqueEmail('reclaimed') });
    const victim = idpAccount({ email: squatter.email });
    await new Browser(app.url).post('/v1/auth/password-reset/request', { email: squatter.email });
    const resetMail = await app.inbox.next(squatter.email, { subject: 'Reset your password' });
    const token = /reset-password\?token=([a-z2-7]+)/.exec(resetMail.text)?.[1] ?? '';
    expect((await new Browser(app.url).post('/v1/auth/password-reset/confirm', { token, password: 'the owner’s own passphrase' })).status).toBe(200);

    const { browser, response } = await signInWithIdp(victim);
    expect(response.status).toBe(302);
    expect((await sessionOf(browser)).user).toMatchObject({ id: squatter.user.id, email_verified: true });
    expect((await squatter.browser.get('/v1/auth/session')).status).toBe(401);
    expect((await new Browser(app.url).post('/v1/user/signin', { email: squatter.email, password: PASSWORD })).status).toBe(401);
  });

  it('links while signed in to that very account, verifies the email and ends every other session', async () => {
    const { browser, email, user } = await registeredRedirectBrowser();
    const before = browser.cookie(`${APP_ORIGIN}/`, 'session') ?? '';
    const elsewhere = new Browser(app.url);
    expect((await elsewhere.post('/v1/user/signin', { email, password: PASSWORD })).status).toBe(200);
    const account = idpAccount({ email });

    idp.signInAs(account);
    const { response, location } = await browser.navigate(`${APP_ORIGIN}/v1/sso/login/testidp`);
    expect(response.status).toBe(302);
    expect(location).toBe(`${WEB_APP}/`);
    const session = await sessionOf(browser);
    expect(session).toMatchObject({ user: { id: user.id, email_verified: true }, session: { auth_method: 'testidp' } });
    expect(await app.db('user_identities').where({ user_id: user.id }).select('subject')).toEqual([{ subject: account.sub }]);

    // Only the new session remains: the one that proved the account and the other browser's are gone.
    expect(browser.cookie(`${APP_ORIGIN}/`, 'session')).not.toBe(before);
    expect(await app.db('sessions').where({ user_id: user.id }).count({ n: '*' })).toEqual([{ n: '1' }]);
    expect((await fetch(`${app.url}/v1/auth/session`, { headers: { cookie: `session=${before}` } })).status).toBe(401);
    expect((await elsewhere.get('/v1/auth/session')).status).toBe(401);
  });

  it('does not link from a session of another account', async () => {
    const unverified = await registeredUser(app);
    const { browser, user: other } = await registeredRedirectBrowser();

    idp.signInAs(idpAccount({ email: unverified.email }));
    const { response } = await browser.navigate(`${APP_ORIGIN}/v1/sso/login/testidp`);
    expect(response.status).toBe(409);
    expect(await problemOf(response)).toMatchObject({ code: 'SSO_LINK_REQUIRES_SIGN_IN' });
    expect(await app.db('user_identities').whereIn('user_id', [unverified.user.id, other.id]).first()).toBeUndefined();
    expect((await sessionOf(browser)).user.id).toBe(other.id);
  });

  it('refuses a second subject at the same provider with 409 SSO_ACCOUNT_ALREADY_LINKED', async () => {
    const { email, user } = await verifiedUser(app);
    const first = idpAccount({ email });
    expect((await signInWithIdp(first)).response.status).toBe(302);

    const second = idpAccount({ email });
    const { browser, response } = await signInWithIdp(second);
    expect(response.status).toBe(409);
    expect(await problemOf(response)).toMatchObject({ code: 'SSO_ACCOUNT_ALREADY_LINKED' });
    expect(browser.cookie(`${APP_ORIGIN}/`, 'session')).toBeUndefined();
    expect(await app.db('user_identities').where({ user_id: user.id }).select('subject')).toEqual([{ subject: first.sub }]);
    // The linked subject still signs in.
    expect((await sessionOf((await signInWithIdp(first)).browser)).user.id).toBe(user.id);
  });
});
