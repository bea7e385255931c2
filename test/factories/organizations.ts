import { expect } from 'vitest';
import type { TestApp } from '../helpers/app.ts';
import { Browser } from '../helpers/browser.ts';
import { PASSWORD, registeredUser, SUBJECTS, uniqueEmail } from './accounts.ts';

type InvitedRole = 'viewer' | 'member' | 'admin';

/** Invites `email` through the API and returns the token read from the invitation email. */
export async function invite(app: TestApp, inviter: Browser, email: string, role: InvitedRole = 'member') {
  const response = await inviter.post('/v1/organization/invitations', { email, role });
  expect(response.status, await response.clone().text()).toBe(201);
  const invitation = (await response.json()) as { id: number };
  const message = await app.inbox.next(email, { subject: SUBJECTS.invitation });
  const token = /\/invitations\/([a-z2-7]+)/.exec(message.text)?.[1];
  expect(token).toBeDefined();
  return { invitation, token: token ?? '', message };
}

/** A new user who joined the inviter's organization with `role` by registering through the invitation. */
export async function invitedMember(app: TestApp, inviter: Browser, role: InvitedRole) {
  const email = uniqueEmail(role);
  const { token } = await invite(app, inviter, email, role);
  const browser = new Browser(app.url);
  const response = await browser.post('/v1/invitations/register', { token, password: PASSWORD, first_name: role });
  expect(response.status).toBe(201);
  return { browser, email };
}

/** An organization with one user of each role, each signed in. */
export async function team(app: TestApp) {
  const owner = await registeredUser(app);
  const [admin, member, viewer] = await Promise.all([
    invitedMember(app, owner.browser, 'admin'),
    invitedMember(app, owner.browser, 'member'),
    invitedMember(app, owner.browser, 'viewer'),
  ]);
  return { super_admin: owner, admin, member, viewer };
}
