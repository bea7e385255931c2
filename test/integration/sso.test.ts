import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { PASSWORD, registeredUser, signedIn, uniqueEmail, unverifiedUser, verifiedUser } from '../factories/accounts.ts';
import { apiKey } from '../factories/api-keys.ts';
import { invite } from '../factories/organizations.ts';
import { APP_ORIGIN, startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser, keyClient, parseSetCookie } from '../helpers/browser.ts';
import { jsonOf, statusOf, type Problem } from '../helpers/http.ts';
import { TestIdentityProvider, type IdpAccount } from '../helpers/oidc-provider.ts';
import { RedirectBrowser } from '../helpers/redirect-browser.ts';
import { expireInvitation } from '../helpers/time-travel.ts';

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

type Session = components['schemas']['SessionResponse'];

/** The Problem of a redirect flow's last answer (a navigation is a series of raw requests; each of the service's answers is checked against the document). */
const problemOf = (response: Response) => jsonOf<Problem>(response);
const anonymous = () => new Browser(app.url).api;

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
  const { data, response } = await browser.api(APP_ORIGIN).GET('/v1/auth/session');
  expect(response.status).toBe(200);
  return data as Session;
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
    const { data, response } = await anonymous().GET('/v1/sso/providers');
    expect(response.status).toBe(200);
    expect(data).toEqual({
      providers: [{ name: 'testidp', display_name: 'Testidp', configured: true, login_url: `${APP_ORIGIN}/v1/sso/login/testidp` }],
    });
  });
});

describe('GET /v1/sso/login/{provider}', () => {
  it('redirects to the provider with PKCE S256, state, nonce and scope, and sets the sso_state cookie', async () => {
    const { response } = await anonymous().GET('/v1/sso/login/{provider}', { params: { path: { provider: 'testidp' }, query: { return_to: '/deployments' } } });
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
    const { error, response } = await anonymous().GET('/v1/sso/login/{provider}', { params: { path: { provider: 'testidp' }, query: { return_to: returnTo } } });
    expect(response.status).toBe(422);
    expect(error?.code).toBe('VALIDATION_FAILED');
    expect(error?.errors?.map((e) => e.location)).toEqual(['query/return_to']);
    expect(response.headers.getSetCookie()).toEqual([]);
  });

  it('answers 404 NOT_FOUND for a provider name the server does not have', async () => {
    const path = { provider: 'google' };
    for (const { error, response } of [
      await anonymous().GET('/v1/sso/login/{provider}', { params: { path } }),
      await anonymous().GET('/v1/sso/callback/{provider}', { params: { path, query: { code: 'abc', state: 'def' } } }),
    ]) {
      expect(response.status).toBe(404);
      expect(error).toMatchObject({ code: 'NOT_FOUND' });
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
    const completed = await browser.api(APP_ORIGIN).PATCH('/v1/user/profile', {
      headers: { origin: WEB_APP, 'x-csrf-token': csrf },
      body: { organization: 'Navy Labs' },
    });
    expect(completed.response.status).toBe(200);
    expect(completed.data).toMatchObject({
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
    expect(await statusOf(registration.api.GET('/v1/auth/session'))).toBe(401);
    expect(await statusOf(anonymous().POST('/v1/user/signin', { body: { email, password: PASSWORD } }))).toBe(200);
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
    const { email, user } = await unverifiedUser(app);
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
    expect(await statusOf(browser.api(APP_ORIGIN).GET('/v1/sso/login/{provider}', { params: { path: { provider: 'testidp' } } }))).toBe(302);

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
    const { data, response } = await new Browser(bare.url).api.GET('/v1/sso/providers');
    expect(response.status).toBe(200);
    expect(data).toEqual({ providers: [{ name: 'google', display_name: 'Google', configured: false, login_url: null }] });
  });

  it('answers 404 SSO_NOT_CONFIGURED on its login and callback routes', async () => {
    const api = new Browser(bare.url).api;
    const path = { provider: 'google' };
    for (const { error, response } of [
      await api.GET('/v1/sso/login/{provider}', { params: { path } }),
      await api.GET('/v1/sso/callback/{provider}', { params: { path, query: { code: 'abc', state: 'def' } } }),
    ]) {
      expect(response.status).toBe(404);
      expect(error).toMatchObject({ code: 'SSO_NOT_CONFIGURED' });
    }
  });
});

describe('SSO on behalf of an invitation', () => {
  /** Starts SSO for an invitation through the API, then follows the provider's redirects. */
  async function acceptWithSso(token: string, account: IdpAccount) {
    idp.signInAs(account);
    const browser = freshBrowser();
    const started = await browser.api(APP_ORIGIN).POST('/v1/invitations/sso/{provider}/start', { params: { path: { provider: 'testidp' } }, body: { token } });
    expect(started.response.status).toBe(200);
    const authorization_url = started.data?.authorization_url ?? '';
    expect(new URL(authorization_url).origin).toBe(idp.issuer);
    const navigation = await browser.navigate(authorization_url);
    return { browser, landing: new URL(navigation.location ?? '') };
  }

  async function invitationFor(email: string) {
    const owner = await registeredUser(app, { organization: 'SSO Inviters' });
    const { token } = await invite(app, owner, email, 'member');
    return { owner, token };
  }

  const startSso = (provider: string, token: string) =>
    anonymous().POST('/v1/invitations/sso/{provider}/start', { params: { path: { provider } }, body: { token } });

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
    const { data: members = [] } = await owner.api.GET('/v1/organization/members');
    expect(members.map((m) => m.email)).toContain(account.email);
  });

  it('signs in but leaves the invitation pending when the verified email is not the invitee’s', async () => {
    const { owner, token } = await invitationFor(uniqueEmail('invitee'));
    const { browser, landing } = await acceptWithSso(token, idpAccount());
    expect(landing.searchParams.get('invitation_error')).toBe('INVITATION_EMAIL_MISMATCH');
    expect((await sessionOf(browser)).user.requires_profile_completion).toBe(true);
    const { data: invitations = [] } = await owner.api.GET('/v1/organization/invitations');
    expect(invitations[0]?.status).toBe('pending');
  });

  it('refuses to start for an unknown, used or expired token', async () => {
    const unknown = await startSso('testidp', 'nosuchtoken');
    expect(unknown.response.status).toBe(404);
    expect(unknown.error?.code).toBe('INVITATION_NOT_FOUND');

    const { token } = await invitationFor(uniqueEmail('late'));
    await expireInvitation(app, { token });
    expect(await statusOf(startSso('testidp', token))).toBe(410);
  });

  it('answers 404 NOT_FOUND for a provider the server does not have', async () => {
    const { token } = await invitationFor(uniqueEmail('other'));
    const { error, response } = await startSso('nope', token);
    expect(response.status).toBe(404);
    expect(error?.code).toBe('NOT_FOUND');
  });
});

describe('linking an identity to an existing account (email ownership)', () => {
  /** A RedirectBrowser signed in to a new password account (email unverified), as the web app would be. */
  async function registeredRedirectBrowser(email = uniqueEmail('linker')) {
    const browser = freshBrowser();
    const { data, response } = await browser.api(APP_ORIGIN).POST('/v1/user/register', {
      headers: { origin: APP_ORIGIN },
      body: { email, password: PASSWORD, organization: `Org of ${email}` },
    });
    expect(response.status).toBe(201);
    return { browser, email, user: (data as Session).user };
  }

  it('refuses to link an account whose email nobody verified with 409 SSO_LINK_REQUIRES_SIGN_IN (pre-hijack)', async () => {
    // The squatter registers the victim's address with a password of their own, and stays signed in.
    const squatter = await unverifiedUser(app, { email: uniqueEmail('victim') });
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
    expect((await squatter.api.GET('/v1/auth/session')).data).toMatchObject({ user: { id: squatter.user.id, email_verified: false } });
  });

  it('lets the owner of the mailbox take the address back with a reset, after which SSO links and the squatter is out', async () => {
    const squatter = await unverifiedUser(app, { email: uniqueEmail('reclaimed') });
    const victim = idpAccount({ email: squatter.email });
    await anonymous().POST('/v1/auth/password-reset/request', { body: { email: squatter.email } });
    const resetMail = await app.inbox.next(squatter.email, { subject: 'Reset your password' });
    const token = /reset-password\?token=([a-z2-7]+)/.exec(resetMail.text)?.[1] ?? '';
    expect(await statusOf(anonymous().POST('/v1/auth/password-reset/confirm', { body: { token, password: 'the owner’s own passphrase' } }))).toBe(200);

    const { browser, response } = await signInWithIdp(victim);
    expect(response.status).toBe(302);
    expect((await sessionOf(browser)).user).toMatchObject({ id: squatter.user.id, email_verified: true });
    expect(await statusOf(squatter.api.GET('/v1/auth/session'))).toBe(401);
    expect(await statusOf(anonymous().POST('/v1/user/signin', { body: { email: squatter.email, password: PASSWORD } }))).toBe(401);
  });

  it('links while signed in to that very account, verifies the email and ends every other session', async () => {
    const { browser, email, user } = await registeredRedirectBrowser();
    const before = browser.cookie(`${APP_ORIGIN}/`, 'session') ?? '';
    const elsewhere = await signedIn(app, email);
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
    const replay = new Browser(app.url);
    replay.cookies.set('session', before);
    expect(await statusOf(replay.api.GET('/v1/auth/session'))).toBe(401);
    expect(await statusOf(elsewhere.api.GET('/v1/auth/session'))).toBe(401);
  });

  it('clears the password nobody proved, and takes back what the account made, when linking proves its address', async () => {
    const { browser, email, user } = await registeredRedirectBrowser();
    const elsewhere = await signedIn(app, email);
    // A key made before unverified accounts were refused keys.
    await app.db('users').where({ id: user.id }).update({ email_verified_at: new Date() });
    const key = await apiKey(elsewhere, [], { allow_hosted_models: true });
    await app.db('users').where({ id: user.id }).update({ email_verified_at: null });
    expect(await statusOf(keyClient(app.url, key.key).GET('/v1/models'))).toBe(200);

    idp.signInAs(idpAccount({ email }));
    expect((await browser.navigate(`${APP_ORIGIN}/v1/sso/login/testidp`)).response.status).toBe(302);
    expect((await sessionOf(browser)).user).toMatchObject({ id: user.id, email_verified: true });

    // The password set before anyone proved the address signs in no more: a reset sets a new one.
    const signIn = await anonymous().POST('/v1/user/signin', { body: { email, password: PASSWORD } });
    expect(signIn.response.status).toBe(401);
    expect(await app.db('users').where({ id: user.id }).first('password_hash')).toEqual({ password_hash: null });
    expect(await statusOf(elsewhere.api.GET('/v1/auth/session'))).toBe(401);
    expect(await statusOf(keyClient(app.url, key.key).GET('/v1/models'))).toBe(401);
  });

  it('does not link from a session of another account', async () => {
    const unverified = await unverifiedUser(app);
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
