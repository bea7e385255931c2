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
