import { randomUUID } from 'node:crypto';
import type { TestApp } from '../helpers/app.ts';
import { Browser } from '../helpers/browser.ts';

let counter = 0;

/** A unique, valid email. */
export function uniqueEmail(prefix = 'user'): string {
  return `${prefix}-${++counter}-${randomUUID().slice(0, 8)}@example.com`;
}

export const PASSWORD = 'correct horse battery staple';

/** Registers a new user (and organization) through the API; returns their signed-in browser. */
export async function registeredUser(app: TestApp, overrides: Record<string, unknown> = {}) {
  const browser = new Browser(app.url);
  const email = (overrides.email as string | undefined) ?? uniqueEmail();
  const body = { email, password: PASSWORD, organization: `Org of ${email}`, ...overrides };
  const response = await browser.post('/v1/user/register', body);
  if (response.status !== 201) throw new Error(`register failed: ${response.status} ${await response.text()}`);
  const session = (await response.json()) as { user: { id: number; email: string } };
  return { browser, email, password: String(body.password), user: session.user };
}

/** Subjects of the emails the service sends, to pick one kind out of an inbox. */
export const SUBJECTS = { verification: 'Confirm your email address', reset: 'Reset your password', invitation: ' invited you to ' } as const;

/** The token of the next verification email to `email`, read from the SMTP listener. */
export async function verificationToken(app: TestApp, email: string): Promise<string> {
  const message = await app.inbox.next(email, { subject: SUBJECTS.verification });
  const token = /\/verify-email\?token=([a-z2-7]+)/.exec(message.text)?.[1];
  if (!token) throw new Error(`no verification link in: ${message.text}`);
  return token;
}

/** A registered user who confirmed their email through the link of the verification email. */
export async function verifiedUser(app: TestApp, overrides: Record<string, unknown> = {}) {
  const registered = await registeredUser(app, overrides);
  const token = await verificationToken(app, registered.email);
  const response = await new Browser(app.url).post('/v1/user/email-verification/confirm', { token });
  if (response.status !== 200) throw new Error(`confirm failed: ${response.status} ${await response.text()}`);
  return registered;
}
