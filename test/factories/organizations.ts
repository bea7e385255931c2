import { expect } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import type { TestApp } from '../helpers/app.ts';
import { Browser } from '../helpers/browser.ts';
import { insertUser, setCurrentOrganization } from '../../src/accounts/accounts.repository.ts';
import { newUserProfile } from '../../src/accounts/identity-rules.ts';
import { hashPassword } from '../../src/accounts/passwords.ts';
import { insertMembership } from '../../src/organizations/organizations.repository.ts';
import { assertDeliversEmail, PASSWORD, registeredUser, signedIn, SUBJECTS, uniqueEmail, type SignedInUser } from './accounts.ts';

export type InvitedRole = components['schemas']['InvitationRole'];
export type Invitation = components['schemas']['Invitation'];

/** Invites `email` through the API and returns the token read from the invitation email. */
export async function invite(app: TestApp, inviter: Pick<SignedInUser, 'api'>, email: string, role: InvitedRole = 'member') {
  assertDeliversEmail(app);
  const { data: invitation, error, response } = await inviter.api.POST('/v1/organization/invitations', { body: { email, role } });
  expect(response.status, JSON.stringify(error)).toBe(201);
  const message = await app.inbox.next(email, { subject: SUBJECTS.invitation });
  const token = /\/invitations\/([a-z2-7]+)/.exec(message.text)?.[1];
  expect(token).toBeDefined();
  return { invitation: invitation as Invitation, token: token ?? '', message };
}

/** A new user who joined the inviter's organization with `role` by registering through the invitation. */
export async function invitedMember(app: TestApp, inviter: Pick<SignedInUser, 'api'>, role: InvitedRole): Promise<SignedInUser> {
  const email = uniqueEmail(role);
  const { token } = await invite(app, inviter, email, role);
  const browser = new Browser(app.url);
  const { data, response } = await browser.api.POST('/v1/invitations/register', { body: { token, password: PASSWORD, first_name: role } });
  expect(response.status).toBe(201);
  if (!data) throw new Error('no session');
  return { browser, api: browser.api, email, password: PASSWORD, user: data.user };
}

/**
 * A new user who is a member of the organization with `role`, as one who registered through an
 * invitation (verified email, no organization of their own), written with the accounts and
 * organizations repositories and signed in through the API: for an app without workers, where no
 * invitation email goes out.
 */
export async function addedMember(app: TestApp, organizationId: number, role: InvitedRole): Promise<SignedInUser> {
  const email = uniqueEmail(role);
  const passwordHash = await hashPassword(PASSWORD);
  await app.db.transaction(async (trx) => {
    const userId = await insertUser(trx, { email, password_hash: passwordHash, emailVerified: true, ...newUserProfile({ first_name: role }, email) });
    await insertMembership(trx, { organization_id: organizationId, user_id: userId, role });
    await setCurrentOrganization(trx, userId, organizationId);
  });
  return signedIn(app, email);
}

/**
 * An organization with one user of each role, each signed in: joined through invitations (the API
 * and the email they get) in an app with workers, added with the repositories in one without.
 */
export async function team(app: TestApp) {
  const owner = await registeredUser(app);
  const { data: organization } = await owner.api.GET('/v1/organization');
  if (!organization) throw new Error('the owner has no organization');
  const join = (role: InvitedRole) => (app.workers ? invitedMember(app, owner, role) : addedMember(app, organization.id, role));
  const [admin, member, viewer] = await Promise.all([join('admin'), join('member'), join('viewer')]);
  return { super_admin: owner, admin, member, viewer };
}

export type Team = Awaited<ReturnType<typeof team>>;
