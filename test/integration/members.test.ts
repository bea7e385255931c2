import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { PROVISION_QUEUE } from '../../src/deployments/provisioning.ts';
import { apiKey } from '../factories/api-keys.ts';
import { PASSWORD, registeredUser, signedIn } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import { invite, invitedMember, team, type Team } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser, keyClient, type Api } from '../helpers/browser.ts';
import { statusOf, unchecked } from '../helpers/http.ts';
import { expireInvitation } from '../helpers/time-travel.ts';

type Role = components['schemas']['Role'];

let app: TestApp;
beforeAll(async () => {
  // Workers deliver the invitation emails; deployments stay `requested`: these tests are about who
  // owns them, not about provisioning.
  app = await startTestApp({}, { workers: true });
  await app.container.boss.offWork(PROVISION_QUEUE);
});
afterAll(() => app.close());
// Every team registers three people through invitations from one address: start each test with
// that address's count cleared, as if the requests came from elsewhere.
beforeEach(async () => {
  await app.container.limiter.reset('invitation-register:address:127.0.0.1');
});

const membersOf = async (api: Api) => (await api.GET('/v1/organization/members')).data ?? [];
const setRole = (api: Api, userId: number, role: Role) =>
  api.PATCH('/v1/organization/members/{user_id}', { params: { path: { user_id: userId } }, body: { role } });
const remove = (api: Api, userId: number) => api.DELETE('/v1/organization/members/{user_id}', { params: { path: { user_id: userId } } });
const revoke = (api: Api, invitationId: number) =>
  api.DELETE('/v1/organization/invitations/{invitation_id}', { params: { path: { invitation_id: invitationId } } });
const preview = (token: string) => new Browser(app.url).api.GET('/v1/invitations/by-token/{token}', { params: { path: { token } } });

describe('changing a member’s role', () => {
  let members: Team;
  beforeAll(async () => {
    members = await team(app);
  });

  it('lets an admin make a member a viewer and back; the new role applies to the next request', async () => {
    const memberId = members.member.user.id;
    const { data, response } = await setRole(members.admin.api, memberId, 'viewer');
    expect(response.status).toBe(200);
    expect(data).toMatchObject({ user_id: memberId, email: members.member.email, role: 'viewer' });
    expect((await members.member.api.GET('/v1/auth/session')).data).toMatchObject({ user: { role: { name: 'viewer' } } });
    expect(await statusOf(members.member.api.POST('/api/v1/model-deployments', { body: { model_name: 'qwen2.5-instruct' } }))).toBe(403);
    expect(await statusOf(setRole(members.admin.api, memberId, 'member'))).toBe(200);
  });

  it('refuses an admin who gives the role admin or super_admin with 403 FORBIDDEN', async () => {
    const viewerId = members.viewer.user.id;
    for (const role of ['admin', 'super_admin'] as const) {
      const { error, response } = await setRole(members.admin.api, viewerId, role);
      expect(response.status).toBe(403);
      expect(error?.code).toBe('FORBIDDEN');
    }
    expect((await membersOf(members.admin.api)).find((m) => m.user_id === viewerId)?.role).toBe('viewer');
  });

  it('refuses an admin who changes a super_admin’s role, or their own', async () => {
    const ownerId = members.super_admin.user.id;
    expect(await statusOf(setRole(members.admin.api, ownerId, 'viewer'))).toBe(403);
    expect(await statusOf(setRole(members.admin.api, members.admin.user.id, 'member'))).toBe(403);
    expect((await membersOf(members.admin.api)).find((m) => m.user_id === ownerId)?.role).toBe('super_admin');
  });

  it('refuses viewers and members with 403 FORBIDDEN', async () => {
    const viewerId = members.viewer.user.id;
    expect(await statusOf(setRole(members.member.api, viewerId, 'member'))).toBe(403);
    expect(await statusOf(setRole(members.viewer.api, viewerId, 'member'))).toBe(403);
  });

  it('answers 404 for an unknown user and for a user of another organization', async () => {
    const stranger = await registeredUser(app);
    for (const userId of [stranger.user.id, 2_000_000_000]) {
      const { error, response } = await setRole(members.super_admin.api, userId, 'viewer');
      expect(response.status).toBe(404);
      expect(error?.code).toBe('NOT_FOUND');
    }
    expect((await stranger.api.GET('/v1/auth/session')).data).toMatchObject({ user: { role: { name: 'super_admin' } } });
  });

  it('refuses an unknown role and unknown fields with 422', async () => {
    const viewerId = members.viewer.user.id;
    expect(await statusOf(setRole(members.super_admin.api, viewerId, unchecked('owner')))).toBe(422);
    const path = { user_id: viewerId };
    expect(await statusOf(members.super_admin.api.PATCH('/v1/organization/members/{user_id}', { params: { path }, body: unchecked({ role: 'member', email: 'x@example.com' }) }))).toBe(422);
  });
});

describe('super_admins', () => {
  it('lets a super_admin make someone admin or super_admin, and keeps the last super_admin from being demoted', async () => {
    const { super_admin: owner, member } = await team(app);
    const ownerId = owner.user.id;
    const lastDemotion = await setRole(owner.api, ownerId, 'admin');
    expect(lastDemotion.response.status).toBe(409);
    expect(lastDemotion.error?.code).toBe('LAST_SUPER_ADMIN');

    const memberId = member.user.id;
    expect((await setRole(owner.api, memberId, 'admin')).data).toMatchObject({ role: 'admin' });
    expect((await setRole(owner.api, memberId, 'super_admin')).data).toMatchObject({ role: 'super_admin' });
    // Two super_admins now: either may step down, but not both.
    expect((await setRole(owner.api, ownerId, 'admin')).data).toMatchObject({ role: 'admin' });
    expect((await setRole(member.api, memberId, 'admin')).error?.code).toBe('LAST_SUPER_ADMIN');
  });

  it('never lets two super_admins demote each other at once', async () => {
    const { super_admin: owner, member } = await team(app);
    const [ownerId, memberId] = [owner.user.id, member.user.id];
    expect(await statusOf(setRole(owner.api, memberId, 'super_admin'))).toBe(200);
    const answers = await Promise.all([setRole(owner.api, memberId, 'member'), setRole(member.api, ownerId, 'member')]);
    // The loser finds either that it is the last super_admin (409) or that it was just demoted (403).
    const statuses = answers.map((r) => r.response.status).sort();
    expect(statuses[0]).toBe(200);
    expect([403, 409]).toContain(statuses[1]);
    const roles = await app.db('memberships').whereIn('user_id', [ownerId, memberId]).pluck('role');
    expect(roles.filter((role) => role === 'super_admin')).toHaveLength(1);
  });

  it('keeps the last super_admin from leaving or being removed', async () => {
    const { super_admin: owner } = await team(app);
    const { error, response } = await remove(owner.api, owner.user.id);
    expect(response.status).toBe(409);
    expect(error?.code).toBe('LAST_SUPER_ADMIN');
    expect(await statusOf(owner.api.GET('/v1/organization'))).toBe(200);
  });
});

describe('removing a member', () => {
  it('evicts a hijacked admin: every session of theirs in the organization ends at once and they can no longer act', async () => {
    const { super_admin: owner, admin } = await team(app);
    const adminId = admin.user.id;
    const otherDevice = await signedIn(app, admin.email);

    const { response } = await remove(owner.api, adminId);
    expect(response.status).toBe(204);
    expect(response.headers.getSetCookie()).toEqual([]);
    for (const { api } of [admin, otherDevice]) {
      expect(await statusOf(api.GET('/v1/organization/members'))).toBe(401);
      expect(await statusOf(api.POST('/v1/organization/invitations', { body: { email: 'accomplice@example.com', role: 'member' } }))).toBe(401);
    }
    expect((await membersOf(owner.api)).map((m) => m.user_id)).not.toContain(adminId);
    // Signing in again lands nowhere in this organization.
    const again = await signedIn(app, admin.email);
    expect(await statusOf(again.api.GET('/v1/organization/members'))).toBe(403);
  });

  it('keeps the removed member’s sessions in their other organizations working', async () => {
    const { super_admin: owner, member } = await team(app);
    const otherOwner = await registeredUser(app);
    const { token } = await invite(app, otherOwner, member.email, 'viewer');
    const inOther = await signedIn(app, member.email);
    expect(await statusOf(inOther.api.POST('/v1/invitations/by-token/{token}/accept', { params: { path: { token } } }))).toBe(200);

    expect(await statusOf(remove(owner.api, member.user.id))).toBe(204);
    expect(await statusOf(member.api.GET('/v1/auth/session'))).toBe(401);
    const other = await inOther.api.GET('/v1/organization');
    expect(other.response.status).toBe(200);
    expect(other.data).toMatchObject({ name: `Org of ${otherOwner.email}`, role: 'viewer' });
  });

  it('lets an admin remove members and viewers, but not another admin or a super_admin', async () => {
    const { super_admin: owner, admin, member, viewer } = await team(app);
    const second = await invitedMember(app, owner, 'admin');
    for (const target of [second, owner]) {
      const { error, response } = await remove(admin.api, target.user.id);
      expect(response.status).toBe(403);
      expect(error?.code).toBe('FORBIDDEN');
      expect(await statusOf(target.api.GET('/v1/organization'))).toBe(200);
    }
    expect(await statusOf(remove(admin.api, member.user.id))).toBe(204);
    expect(await statusOf(remove(admin.api, viewer.user.id))).toBe(204);
    expect((await membersOf(owner.api)).map((m) => m.role).sort()).toEqual(['admin', 'admin', 'super_admin']);
    // The super_admin may remove an admin.
    expect(await statusOf(remove(owner.api, second.user.id))).toBe(204);
  });

  it('refuses viewers and members who remove someone else', async () => {
    const { super_admin: owner, member, viewer } = await team(app);
    expect(await statusOf(remove(viewer.api, member.user.id))).toBe(403);
    expect(await statusOf(remove(member.api, viewer.user.id))).toBe(403);
    expect(await membersOf(owner.api)).toHaveLength(4);
  });

  it('answers 404 for a user of another organization and for an unknown id, and leaves them alone', async () => {
    const { super_admin: owner } = await team(app);
    const stranger = await registeredUser(app);
    for (const userId of [stranger.user.id, 2_000_000_000]) {
      const { error, response } = await remove(owner.api, userId);
      expect(response.status).toBe(404);
      expect(error?.code).toBe('NOT_FOUND');
    }
    expect(await statusOf(stranger.api.GET('/v1/organization'))).toBe(200);
  });

  it('lets any member leave: their session here ends and its cookies are cleared', async () => {
    const { super_admin: owner, viewer } = await team(app);
    const viewerId = viewer.user.id;
    const { response } = await remove(viewer.api, viewerId);
    expect(response.status).toBe(204);
    expect(response.headers.getSetCookie().length).toBe(2);
    expect(viewer.browser.cookies.size).toBe(0);
    expect((await membersOf(owner.api)).map((m) => m.user_id)).not.toContain(viewerId);
  });

  it('passes the removed member’s deployments to the remover', async () => {
    const { super_admin: owner, admin } = await team(app);
    const made = await deployment(app, admin, 'requested');
    expect(made.user_id).toBe(String(admin.user.id));

    expect(await statusOf(remove(owner.api, admin.user.id))).toBe(204);

    const owned = (await owner.api.GET('/api/v1/model-deployments')).data;
    expect(owned?.items).toContainEqual(expect.objectContaining({ id: made.id, user_id: String(owner.user.id) }));
  });

  it('evicts a hijacked admin’s API keys and pending invitations with them: the key gets 401, the invitation can no longer be accepted', async () => {
    const { super_admin: owner, admin } = await team(app);
    const made = await deployment(app, admin, 'requested');
    const backdoor = await apiKey(admin, [made.id], { name: 'made by the admin', allow_hosted_models: true });
    const ownersKey = await apiKey(owner, [made.id], { name: 'made by the owner' });
    const email = `accomplice-${Date.now()}@example.com`;
    const { invitation, token } = await invite(app, admin, email, 'member');
    const keys = (await owner.api.GET('/v1/organization/api-keys')).data?.items ?? [];
    expect(keys.find((k) => k.id === backdoor.id)?.created_by_user_id).toBe(admin.user.id);
    expect(keys.find((k) => k.id === ownersKey.id)?.created_by_user_id).toBe(owner.user.id);
    // Used once before the removal: the key is in this process's cache too.
    expect(await statusOf(keyClient(app.url, backdoor.key).GET('/v1/models'))).toBe(200);

    expect(await statusOf(remove(owner.api, admin.user.id))).toBe(204);

    const { error, response } = await keyClient(app.url, backdoor.key).GET('/v1/models');
    expect(response.status).toBe(401);
    expect(error).toMatchObject({ error: { code: 'api_key_revoked' } });
    const after = (await owner.api.GET('/v1/organization/api-keys')).data?.items ?? [];
    expect(after.find((k) => k.id === backdoor.id)).toMatchObject({ status: 'revoked', created_by_user_id: admin.user.id });
    expect(after.find((k) => k.id === ownersKey.id)?.status).toBe('active');
    expect(await statusOf(keyClient(app.url, ownersKey.key).GET('/v1/models'))).toBe(200);
    const invitations = (await owner.api.GET('/v1/organization/invitations')).data ?? [];
    expect(invitations.find((i) => i.id === invitation.id)).toMatchObject({ status: 'revoked', invited_by_user_id: admin.user.id });
    const register = await new Browser(app.url).api.POST('/v1/invitations/register', { body: { token, password: PASSWORD } });
    expect(register.response.status).toBe(409);
    expect(register.error?.code).toBe('INVITATION_NOT_PENDING');
    expect((await membersOf(owner.api)).map((m) => m.email)).not.toContain(email);
  });

  it('revokes the keys and pending invitations of a member who leaves', async () => {
    const { super_admin: owner, admin } = await team(app);
    const { key, id } = await apiKey(admin, [], { allow_hosted_models: true });
    const { invitation } = await invite(app, admin, `leaver-${Date.now()}@example.com`, 'viewer');
    expect(await statusOf(remove(admin.api, admin.user.id))).toBe(204);
    expect(await statusOf(keyClient(app.url, key).GET('/v1/models'))).toBe(401);
    expect((await owner.api.GET('/v1/organization/api-keys')).data?.items.find((k) => k.id === id)?.status).toBe('revoked');
    expect((await owner.api.GET('/v1/organization/invitations')).data?.find((i) => i.id === invitation.id)?.status).toBe('revoked');
  });

  it('keeps the removed member’s keys and pending invitations when the remover chooses to (keep_credentials=true)', async () => {
    const { super_admin: owner, admin } = await team(app);
    const { key, id } = await apiKey(admin, [], { allow_hosted_models: true });
    const email = `kept-${Date.now()}@example.com`;
    const { token } = await invite(app, admin, email, 'member');

    const { response } = await owner.api.DELETE('/v1/organization/members/{user_id}', {
      params: { path: { user_id: admin.user.id }, query: { keep_credentials: true } },
    });
    expect(response.status).toBe(204);

    expect((await owner.api.GET('/v1/organization/api-keys')).data?.items.find((k) => k.id === id)?.status).toBe('active');
    expect(await statusOf(keyClient(app.url, key).GET('/v1/models'))).toBe(200);
    expect(await statusOf(new Browser(app.url).api.POST('/v1/invitations/register', { body: { token, password: PASSWORD } }))).toBe(201);
    expect((await membersOf(owner.api)).map((m) => m.email)).toContain(email);
  });

  it('passes the deployments of a member who leaves to the longest-standing super_admin', async () => {
    const { super_admin: owner, member } = await team(app);
    const made = await deployment(app, member, 'requested');
    expect(await statusOf(remove(member.api, member.user.id))).toBe(204);
    const { data: mine } = await owner.api.GET('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: made.id } } });
    expect(mine?.user_id).toBe(String(owner.user.id));
  });
});

describe('revoking an invitation', () => {
  let members: Team;
  beforeAll(async () => {
    members = await team(app);
  });

  it('revokes a pending invitation: status revoked, and its link stops working', async () => {
    const email = `revoked-${Date.now()}@example.com`;
    const { invitation, token } = await invite(app, members.admin, email, 'member');
    const { data, response } = await revoke(members.admin.api, invitation.id);
    expect(response.status).toBe(200);
    expect(data).toMatchObject({ id: invitation.id, status: 'revoked' });
    expect((await preview(token)).data).toMatchObject({ status: 'revoked' });
    const register = await new Browser(app.url).api.POST('/v1/invitations/register', { body: { token, password: PASSWORD } });
    expect(register.response.status).toBe(409);
    expect(register.error?.code).toBe('INVITATION_NOT_PENDING');
    expect((await membersOf(members.admin.api)).map((m) => m.email)).not.toContain(email);
  });

  it('revokes an expired invitation, which can then not be resent', async () => {
    const { invitation } = await invite(app, members.admin, `expired-${Date.now()}@example.com`);
    await expireInvitation(app, { id: invitation.id });
    expect((await revoke(members.admin.api, invitation.id)).data).toMatchObject({ status: 'revoked' });
    const path = { invitation_id: invitation.id };
    expect(await statusOf(members.admin.api.POST('/v1/organization/invitations/{invitation_id}/resend', { params: { path } }))).toBe(409);
  });

  it('refuses an invitation already accepted, or revoked, with 409 INVITATION_NOT_PENDING', async () => {
    const invitations = (await members.admin.api.GET('/v1/organization/invitations')).data ?? [];
    const accepted = invitations.find((i) => i.invitee_email === members.member.email);
    expect(accepted?.status).toBe('accepted');
    const { error, response } = await revoke(members.admin.api, accepted?.id ?? 0);
    expect(response.status).toBe(409);
    expect(error?.code).toBe('INVITATION_NOT_PENDING');
  });

  it('lets only a super_admin revoke an invitation for the admin role', async () => {
    const { invitation, token } = await invite(app, members.super_admin, `new-admin-${Date.now()}@example.com`, 'admin');
    expect(await statusOf(revoke(members.admin.api, invitation.id))).toBe(403);
    expect((await preview(token)).data).toMatchObject({ status: 'pending' });
    expect(await statusOf(revoke(members.super_admin.api, invitation.id))).toBe(200);
  });

  it('refuses viewers and members with 403, and answers 404 for another organization’s invitation', async () => {
    const { invitation } = await invite(app, members.admin, `kept-${Date.now()}@example.com`);
    expect(await statusOf(revoke(members.member.api, invitation.id))).toBe(403);
    expect(await statusOf(revoke(members.viewer.api, invitation.id))).toBe(403);
    const stranger = await registeredUser(app);
    const { error, response } = await revoke(stranger.api, invitation.id);
    expect(response.status).toBe(404);
    expect(error?.code).toBe('INVITATION_NOT_FOUND');
    expect(await statusOf(revoke(stranger.api, 2_000_000_000))).toBe(404);
    expect((await members.admin.api.GET('/v1/organization/invitations')).data).toContainEqual(expect.objectContaining({ id: invitation.id, status: 'pending' }));
  });
});
