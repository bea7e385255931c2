import { randomUUID } from 'node:crypto';
import type { components } from '../../generated/api.d.ts';
import type { TestApp } from '../helpers/app.ts';
import { Browser, type Api } from '../helpers/browser.ts';

type RegisterRequest = components['schemas']['RegisterRequest'];
export type SessionUser = components['schemas']['SessionUser'];

let counter = 0;

/** A unique, valid email. */
export function uniqueEmail(prefix = 'user'): string {
  return `${prefix}-${++counter}-${randomUUID().slice(0, 8)}@example.com`;
}

export const PASSWORD = 'correct horse battery staple';

/** A user signed in in a browser of their own; `api` is that browser's typed client. */
export interface SignedInUser {
  browser: Browser;
  api: Api;
  email: string;
  password: string;
  user: SessionUser;
}

/**
 * Registers a new user (and organization) through the API, their email then counted as verified;
 * returns their signed-in browser. An owner acts only with a proven address (API keys, invitations,
 * webhook endpoints, hosted models): the verification link's own path is `verifiedUser`'s, which
 * waits for the email; this one sets `email_verified_at` as the link would, to stay quick.
 */
export async function registeredUser(app: TestApp, overrides: Partial<RegisterRequest> = {}): Promise<SignedInUser> {
  const registered = await unverifiedUser(app, overrides);
  await app.db('users').where({ id: registered.user.id }).update({ email_verified_at: new Date() });
  return { ...registered, user: { ...registered.user, email_verified: true } };
}

/** Registers a new user (and organization) through the API, email not verified; returns their signed-in browser. */
export async function unverifiedUser(app: Pick<TestApp, 'url'>, overrides: Partial<RegisterRequest> = {}): Promise<SignedInUser> {
  const browser = new Browser(app.url);
  const email = overrides.email ?? uniqueEmail();
  const body = { email, password: PASSWORD, organization: `Org of ${email}`, ...overrides };
  const { data, error, response } = await browser.api.POST('/v1/user/register', { body });
  if (!data) throw new Error(`register failed: ${response.status} ${JSON.stringify(error)}`);
  return { browser, api: browser.api, email, password: body.password, user: data.user };
}

/** Signs `email` in through the API in a new browser. */
export async function signedIn(app: TestApp, email: string, password = PASSWORD): Promise<SignedInUser> {
  const browser = new Browser(app.url);
  const { data, error, response } = await browser.api.POST('/v1/user/signin', { body: { email, password } });
  if (!data) throw new Error(`sign-in failed: ${response.status} ${JSON.stringify(error)}`);
  return { browser, api: browser.api, email, password, user: data.user };
}

/** Subjects of the emails the service sends, to pick one kind out of an inbox. */
export const SUBJECTS = { verification: 'Confirm your email address', reset: 'Reset your password', invitation: 'Invitation to join ' } as const;

/** Email goes out through a background job: a test that reads the inbox needs an app with workers. */
export function assertDeliversEmail(app: TestApp): void {
  if (!app.workers) throw new Error('this needs the email the service sends: start the app with { workers: true }');
}

/** The token of the next verification email to `email`, read from the SMTP listener. */
export async function verificationToken(app: TestApp, email: string): Promise<string> {
  assertDeliversEmail(app);
  const message = await app.inbox.next(email, { subject: SUBJECTS.verification });
  const token = /\/verify-email\?token=([a-z2-7]+)/.exec(message.text)?.[1];
  if (!token) throw new Error(`no verification link in: ${message.text}`);
  return token;
}

/** A registered user who confirmed their email through the link of the verification email. */
export async function verifiedUser(app: TestApp, overrides: Partial<RegisterRequest> = {}): Promise<SignedInUser> {
  const registered = await unverifiedUser(app, overrides);
  const token = await verificationToken(app, registered.email);
  const { response, error } = await new Browser(app.url).api.POST('/v1/user/email-verification/confirm', { body: { token } });
  if (response.status !== 200) throw new Error(`confirm failed: ${response.status} ${JSON.stringify(error)}`);
  return { ...registered, user: { ...registered.user, email_verified: true } };
}
