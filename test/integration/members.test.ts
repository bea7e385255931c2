import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { PASSWORD, registeredUser } from '../factories/accounts.ts';
import { invite, invitedMember, team } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser } from '../helpers/browser.ts';
import { jsonOf, type Problem } from '../helpers/http.ts';

let app: TestApp;
beforeAll(async () => {
  app = await startTestApp({}, { workers: true });
  // Deployments stay `requested`: these tests are about who owns them, not about provisioning.
  await app.container.boss.offWork('provision-deployment');
});
afterAll(() => app.close());
// Every team registers three people through invitations from one address: start each test with
// the per-address limits cleared, as if the requests came from elsewhere.
beforeEach(async () => {
  await app.db('rate_limit_points').delete();
});

interface Member {
  id: number;
  user_id: number;
  email: string;
  role: string;
}

const userIdOf = async (browser: Browser) => (await jsonOf<{ user: { id: number } }>(await browser.get('/v1/auth/session'))).user.id;
const membersOf = async (browser: Browser) => jsonOf<Member[]>(await browser.get('/v1/organization/members'));
const setRole = (browser: Browser, userId: number, role: string) => browser.patch(`/v1/organization/members/${userId}`, { role });
const remove = (browser: Browser, userId: number) => browser.delete(`/v1/organization/members/${userId}`);
const codeOf = async (response: Response) => (await jsonOf<Problem>(response)).code;

describe('changing a member’s role', () => {
  let members: Awaited<ReturnType<typeof team>>;
  beforeAll(async () => {
    members = await team(app);
  });

  it('lets an admin make a member a viewer and back; the new role applies to the next request', async () => {
    const memberId = await userIdOf(members.member.browser);
    const response = await setRole(members.admin.browser, memberId, 'viewer');
    expect(response.status).toBe(200);
    expect(await jsonOf(response)).toMatchObject({ user_id: memberId, email: members.member.email, role: 'viewer' });
    expect(await jsonOf(await members.member.browser.get('/v1/auth/session'))).toMatchObject({ user: { role: { name: 'viewer' } } });
    expect((await members.member.browser.post('/api/v1/model-deployments', { model_name: 'qwen2.5-instruct' })).status).toBe(403);
    expect((await setRole(members.admin.browser, memberId, 'member')).status).toBe(200);
  });

  it('refuses an admin who gives the role admin or super_admin with 403 FORBIDDEN', async () => {
    const viewerId = await userIdOf(members.viewer.browser);
    for (const role of ['admin', 'super_admin']) {
      const response = await setRole(members.admin.browser, viewerId, role);
      expect(response.status).toBe(403);
      expect(await codeOf(response)).toBe('FORBIDDEN');
    }
    expect((await membersOf(members.admin.browser)).find((m) => m.user_id === viewerId)?.role).toBe('viewer');
  });

  it('refuses an admin who changes a super_admin’s role, or their own', async () => {
    const ownerId = await userIdOf(members.super_admin.browser);
    expect((await setRole(members.admin.browser, ownerId, 'viewer')).status).toBe(403);
    expect((await setRole(members.admin.browser, await userIdOf(members.admin.browser), 'member')).status).toBe(403);
    expect((await membersOf(members.admin.browser)).find((m) => m.user_id === ownerId)?.role).toBe('super_admin');
  });

  it('refuses viewers and members with 403 FORBIDDEN', async () => {
    const viewerId = await userIdOf(members.viewer.browser);
    expect((await setRole(members.member.browser, viewerId, 'member')).status).toBe(403);
    expect((await setRole(members.viewer.browser, viewerId, 'member')).status).toBe(403);
  });

  it('answers 404 for an unknown user and for a user of another organization', async () => {
    const stranger = await registeredUser(app);
    for (const userId of [stranger.user.id, 2_000_000_000]) {
      const response = await setRole(members.super_admin.browser, userId, 'viewer');
      expect(response.status).toBe(404);
      expect(await codeOf(response)).toBe('NOT_FOUND');
    }
    expect(await jsonOf(await stranger.browser.get('/v1/auth/session'))).toMatchObject({ user: { role: { name: 'super_admin' } } });
  });

  it('refuses an unknown role and unknown fields with 422', async () => {
    const viewerId = await userIdOf(members.viewer.browser);
    expect((await setRole(members.super_admin.browser, viewerId, 'owner')).status).toBe(422);
    expect((await members.super_admin.browser.patch(`/v1/organization/members/${viewerId}`, { role: 'member', email: 'x@example.com' })).status).toBe(422);
  });
});

describe('super_admins', () => {
  it('lets a super_admin make someone admin or super_admin, and keeps the last super_admin from being demoted', async () => {
    const { super_admin: owner, member } = await team(app);
    const ownerId = await userIdOf(owner.browser);
    const lastDemotion = await setRole(owner.browser, ownerId, 'admin');
    expect(lastDemotion.status).toBe(409);
    expect(await codeOf(lastDemotion)).toBe('LAST_SUPER_ADMIN');

    const memberId = await userIdOf(member.browser);
    expect(await jsonOf(await setRole(owner.browser, memberId, 'admin'))).toMatchObject({ role: 'admin' });
    expect(await jsonOf(await setRole(owner.browser, memberId, 'super_admin'))).toMatchObject({ role: 'super_admin' });
    // Two super_admins now: either may step down, but not both.
    expect(await jsonOf(await setRole(owner.browser, ownerId, 'admin'))).toMatchObject({ role: 'admin' });
    expect(await codeOf(await setRole(member.browser, memberId, 'admin'))).toBe('LAST_SUPER_ADMIN');
  });

  it('never lets two super_admins demote each other at once', async () => {
    const { super_admin: owner, member } = await team(app);
    const [ownerId, memberId] = [await userIdOf(owner.browser), await userIdOf(member.browser)];
    expect((await setRole(owner.browser, memberId, 'super_admin')).status).toBe(200);
    const answers = await Promise.all([setRole(owner.browser, memberId, 'member'), setRole(member.browser, ownerId, 'member')]);
    // The loser finds either that it is the last super_admin (409) or that it was just demoted (403).
    const statuses = answers.map((r) => r.status).sort();
    expect(statuses[0]).toBe(200);
    expect([403, 409]).toContain(statuses[1]);
    const roles = await app.db('memberships').whereIn('user_id', [ownerId, memberId]).pluck('role');
    expect(roles.filter((role) => role === 'super_admin')).toHaveLength(1);
  });

  it('keeps the last super_admin from leaving or being removed', async () => {
    const { super_admin: owner } = await team(app);
    const response = await remove(owner.browser, await userIdOf(owner.browser));
    expect(response.status).toBe(409);
    expect(await codeOf(response)).toBe('LAST_SUPER_ADMIN');
    expect((await owner.browser.get('/v1/organization')).status).toBe(200);
  });
});

describe('removing a member', () => {
  it('evicts a hijacked admin: every session of theirs in the organization ends at once and they can no longer act', async () => {
    const { super_admin: owner, admin } = await team(app);
    const adminId = await userIdOf(admin.browser);
    const otherDevice = new Browser(app.url);
    expect((await otherDevice.post('/v1/user/signin', { email: admin.email, password: PASSWORD })).status).toBe(200);

    const response = await remove(owner.browser, adminId);
    expect(response.status).toBe(204);
    expect(response.headers.getSetCookie()).toEqual([]);
    for (const browser of [admin.browser, otherDevice]) {
      expect((await browser.get('/v1/organization/members')).status).toBe(401);
      expect((await browser.post('/v1/organization/invitations', { email: 'accomplice@example.com', role: 'member' })).status).toBe(401);
    }
    expect((await membersOf(owner.browser)).map((m) => m.user_id)).not.toContain(adminId);
    // Signing in again lands nowhere in this organization.
    const again = new Browser(app.url);
    await again.post('/v1/user/signin', { email: admin.email, password: PASSWORD });
    expect((await again.get('/v1/organization/members')).status).toBe(403);
  });

  it('keeps the removed member’s sessions in their other organizations working', async () => {
    const { super_admin: owner, member } = await team(app);
    const otherOwner = await registeredUser(app);
    const { token } = await invite(app, otherOwner.browser, member.email, 'viewer');
    const inOther = new Browser(app.url);
    expect((await inOther.post('/v1/user/signin', { email: member.email, password: PASSWORD })).status).toBe(200);
    expect((await inOther.post(`/v1/invitations/by-token/${token}/accept`)).status).toBe(200);

    expect((await remove(owner.browser, await userIdOf(member.browser))).status).toBe(204);
    expect((await member.browser.get('/v1/auth/session')).status).toBe(401);
    const other = await inOther.get('/v1/organization');
    expect(other.status).toBe(200);
    expect(await jsonOf(other)).toMatchObject({ name: `Org of ${otherOwner.email}`, role: 'viewer' });
  });

  it('lets an admin remove members and viewers, but not another admin or a super_admin', async () => {
    const { super_admin: owner, admin, member, viewer } = await team(app);
    const second = await invitedMember(app, owner.browser, 'admin');
    for (const target of [second.browser, owner.browser]) {
      const response = await remove(admin.browser, await userIdOf(target));
      expect(response.status).toBe(403);
      expect(await codeOf(response)).toBe('FORBIDDEN');
      expect((await target.get('/v1/organization')).status).toBe(200);
    }
    expect((await remove(admin.browser, await userIdOf(member.browser))).status).toBe(204);
    expect((await remove(admin.browser, await userIdOf(viewer.browser))).status).toBe(204);
    expect((await membersOf(owner.browser)).map((m) => m.role).sort()).toEqual(['admin', 'admin', 'super_admin']);
    // The super_admin may remove an admin.
    expect((await remove(owner.browser, await userIdOf(second.browser))).status).toBe(204);
  });

  it('refuses viewers and members who remove someone else', async () => {
    const { super_admin: owner, member, viewer } = await team(app);
    expect((await remove(viewer.browser, await userIdOf(member.browser))).status).toBe(403);
    expect((await remove(member.browser, await userIdOf(viewer.browser))).status).toBe(403);
    expect(await membersOf(owner.browser)).toHaveLength(4);
  });

  it('answers 404 for a user of another organization and for an unknown id, and leaves them alone', async () => {
    const { super_admin: owner } = await team(app);
    const stranger = await registeredUser(app);
    for (const userId of [stranger.user.id, 2_000_000_000]) {
      const response = await remove(owner.browser, userId);
      expect(response.status).toBe(404);
      expect(await codeOf(response)).toBe('NOT_FOUND');
    }
    expect((await stranger.browser.get('/v1/organization')).status).toBe(200);
  });

  it('lets any member leave: their session here ends and its cookies are cleared', async () => {
    const { super_admin: owner, viewer } = await team(app);
    const viewerId = await userIdOf(viewer.browser);
    const response = await remove(viewer.browser, viewerId);
    expect(response.status).toBe(204);
    expect(response.headers.getSetCookie().length).toBe(2);
    expect(viewer.browser.cookies.size).toBe(0);
    expect((await membersOf(owner.browser)).map((m) => m.user_id)).not.toContain(viewerId);
  });

  it('passes the removed member’s deployments to the remover and leaves the API keys they made working', async () => {
    const { super_admin: owner, admin } = await team(app);
    const [ownerId, adminId] = [await userIdOf(owner.browser), await userIdOf(admin.browser)];
    const deployment = await jsonOf<{ id: string; user_id: string }>(await admin.browser.post('/api/v1/model-deployments', { model_name: 'qwen2.5-instruct' }));
    expect(deployment.user_id).toBe(String(adminId));
    const created = await admin.browser.post('/v1/organization/api-keys', { name: 'made by the admin', deployment_ids: [deployment.id] });
    expect(created.status).toBe(201);
    const { key, api_key } = await jsonOf<{ key: string; api_key: { id: number } }>(created);

    expect((await remove(owner.browser, adminId)).status).toBe(204);

    const owned = await jsonOf<{ items: Array<{ id: string; user_id: string }> }>(await owner.browser.get('/api/v1/model-deployments'));
    expect(owned.items).toContainEqual(expect.objectContaining({ id: deployment.id, user_id: String(ownerId) }));
    const keys = await jsonOf<{ items: Array<{ id: number; status: string }> }>(await owner.browser.get('/v1/organization/api-keys'));
    expect(keys.items.find((k) => k.id === api_key.id)?.status).toBe('active');
    expect((await fetch(`${app.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);
  });

  it('passes the deployments of a member who leaves to the longest-standing super_admin', async () => {
    const { super_admin: owner, member } = await team(app);
    const deployment = await jsonOf<{ id: string }>(await member.browser.post('/api/v1/model-deployments', { model_name: 'qwen2.5-instruct' }));
    expect((await remove(member.browser, await userIdOf(member.browser))).status).toBe(204);
    const mine = await jsonOf<{ id: string; user_id: string }>(await owner.browser.get(`/api/v1/model-deployments/${deployment.id}`));
    expect(mine.user_id).toBe(String(await userIdOf(owner.browser)));
  });
});

describe('revoking an invitation', () => {
  let members: Awaited<ReturnType<typeof team>>;
  beforeAll(async () => {
    members = await team(app);
  });

  it('revokes a pending invitation: status revoked, and its link stops working', async () => {
    const email = `revoked-${Date.now()}@example.com`;
    const { invitation, token } = await invite(app, members.admin.browser, email, 'member');
    const response = await members.admin.browser.delete(`/v1/organization/invitations/${invitation.id}`);
    expect(response.status).toBe(200);
    expect(await jsonOf(response)).toMatchObject({ id: invitation.id, status: 'revoked' });
    expect(await jsonOf(await fetch(`${app.url}/v1/invitations/by-token/${token}`))).toMatchObject({ status: 'revoked' });
    const register = await new Browser(app.url).post('/v1/invitations/register', { token, password: PASSWORD });
    expect(register.status).toBe(409);
    expect(await codeOf(register)).toBe('INVITATION_NOT_PENDING');
    expect((await membersOf(members.admin.browser)).map((m) => m.email)).not.toContain(email);
  });

  it('revokes an expired invitation, which can then not be resent', async () => {
    const { invitation } = await invite(app, members.admin.browser, `expired-${Date.now()}@example.com`);
    await app.db('invitations').where({ id: invitation.id }).update({ expires_at: new Date(Date.now() - 1000) });
    expect(await jsonOf(await members.admin.browser.delete(`/v1/organization/invitations/${invitation.id}`))).toMatchObject({ status: 'revoked' });
    expect((await members.admin.browser.post(`/v1/organization/invitations/${invitation.id}/resend`)).status).toBe(409);
  });

  it('refuses an invitation already accepted, or revoked, with 409 INVITATION_NOT_PENDING', async () => {
    const accepted = (await app.db('invitations').where({ invitee_email: members.member.email }).first('id')).id;
    const response = await members.admin.browser.delete(`/v1/organization/invitations/${accepted}`);
    expect(response.status).toBe(409);
    expect(await codeOf(response)).toBe('INVITATION_NOT_PENDING');
  });

  it('lets only a super_admin revoke an invitation for the admin role', async () => {
    const { invitation, token } = await invite(app, members.super_admin.browser, `new-admin-${Date.now()}@example.com`, 'admin');
    expect((await members.admin.browser.delete(`/v1/organization/invitations/${invitation.id}`)).status).toBe(403);
    expect(await jsonOf(await fetch(`${app.url}/v1/invitations/by-token/${token}`))).toMatchObject({ status: 'pending' });
    expect((await members.super_admin.browser.delete(`/v1/organization/invitations/${invitation.id}`)).status).toBe(200);
  });

  it('refuses viewers and members with 403, and answers 404 for another organization’s invitation', async () => {
    const { invitation } = await invite(app, members.admin.browser, `kept-${Date.now()}@example.com`);
    expect((await members.member.browser.delete(`/v1/organization/invitations/${invitation.id}`)).status).toBe(403);
    expect((await members.viewer.browser.delete(`/v1/organization/invitations/${invitation.id}`)).status).toBe(403);
    const stranger = await registeredUser(app);
    const response = await stranger.browser.delete(`/v1/organization/invitations/${invitation.id}`);
    expect(response.status).toBe(404);
    expect(await codeOf(response)).toBe('INVITATION_NOT_FOUND');
    expect((await stranger.browser.delete('/v1/organization/invitations/2000000000')).status).toBe(404);
    expect(await jsonOf(await members.admin.browser.get('/v1/organization/invitations'))).toContainEqual(
      expect.objectContaining({ id: invitation.id, status: 'pending' }),
    );
  });
});
