import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { hashToken } from '../../src/crypto.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import { team } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import type { Api } from '../helpers/browser.ts';
import { statusOf, unchecked } from '../helpers/http.ts';

type CreateApiKeyRequest = components['schemas']['CreateApiKeyRequest'];
type UpdateApiKeyRequest = components['schemas']['UpdateApiKeyRequest'];

let app: TestApp;
let owner: SignedInUser;
let deploymentIds: string[];

beforeAll(async () => {
  // No workers: the deployments stay `requested`.
  app = await startTestApp();
  owner = await registeredUser(app);
  deploymentIds = [];
  for (const model_name of ['qwen2.5-instruct', 'mistral-instruct-v0.3']) deploymentIds.push((await deployment(app, owner, 'requested', { model_name })).id);
});
afterAll(() => app.close());

const createKey = (api: Api, body: CreateApiKeyRequest) => api.POST('/v1/organization/api-keys', { body });
const updateKey = (api: Api, id: number, body: UpdateApiKeyRequest) =>
  api.PATCH('/v1/organization/api-keys/{api_key_id}', { params: { path: { api_key_id: id } }, body });
const revokeKey = (api: Api, id: number) => api.DELETE('/v1/organization/api-keys/{api_key_id}', { params: { path: { api_key_id: id } } });

describe('API key management', () => {
  it('creates a key shown once, stores only its hash, and lists only its prefix', async () => {
    const { data, response } = await createKey(owner.api, { name: 'ci', deployment_ids: [deploymentIds[0] ?? ''] });
    expect(response.status).toBe(201);
    const { key = '', api_key } = data ?? {};
    expect(key).toMatch(/^svc-sk-[0-9A-Za-z]{38}$/);
    expect(api_key).toMatchObject({ name: 'ci', status: 'active', key_prefix: key.slice(0, 15), expires_at: null, revoked_at: null });
    expect(api_key?.deployments).toEqual([{ id: deploymentIds[0], model_name: 'qwen2.5-instruct', status: 'requested' }]);
    const stored = await app.db('api_keys').where({ id: api_key?.id }).first();
    expect(stored.key_hash).toBe(hashToken(key));
    expect(JSON.stringify(stored)).not.toContain(key);
    const listed = await (await owner.api.GET('/v1/organization/api-keys', { parseAs: 'text' })).data;
    expect(listed).toContain(api_key?.key_prefix);
    expect(listed).not.toContain(key);
  });

  it('offers the organization’s deployments that are not terminated', async () => {
    const terminated = await deployment(app, owner, 'terminated');
    const { data } = await owner.api.GET('/v1/organization/api-keys/deployment-options');
    const offered = data?.items.map((d) => d.id) ?? [];
    expect(offered.sort()).toEqual([...deploymentIds].sort());
    expect(offered).not.toContain(terminated.id);
  });

  it('lists follow a change another process makes to the deployments a scope names (kept lists: LIST_CACHE_MIN_ITEMS=0 in test)', async () => {
    const team = await registeredUser(app);
    const scoped = await deployment(app, team, 'requested');
    await createKey(team.api, { name: 'kept', deployment_ids: [scoped.id] });
    const scopeStatus = async () => (await team.api.GET('/v1/organization/api-keys')).data?.items[0]?.deployments[0]?.status;
    const offered = async () => (await team.api.GET('/v1/organization/api-keys/deployment-options')).data?.items.map((d) => d.status);
    // Read three times: the first read marks the organization's lists, the second keeps them, the third reuses them.
    for (let i = 0; i < 3; i++) expect([await scopeStatus(), await offered()]).toEqual(['requested', ['requested']]);
    // As a worker in another process would: straight to the database, no call through this one.
    await app.db('deployments').where({ id: scoped.id }).update({ status: 'provisioning' });
    expect([await scopeStatus(), await offered()]).toEqual(['provisioning', ['provisioning']]);
    await app.db('deployments').where({ id: scoped.id }).update({ status: 'terminated' });
    expect([await scopeStatus(), await offered()]).toEqual(['terminated', []]);
  });

  it('refuses a scope outside the organization, a past expiry and unknown fields with 422', async () => {
    const stranger = await registeredUser(app);
    const theirs = (await deployment(app, stranger, 'requested')).id;
    const outside = await createKey(owner.api, { name: 'x', deployment_ids: [theirs] });
    expect(outside.response.status).toBe(422);
    expect(outside.error?.errors?.[0]?.location).toBe('body/deployment_ids');
    const mine = [deploymentIds[0] ?? ''];
    expect(await statusOf(createKey(owner.api, { name: 'x', deployment_ids: mine, expires_at: '2020-01-01T00:00:00Z' }))).toBe(422);
    expect(await statusOf(createKey(owner.api, { name: 'x', deployment_ids: [] }))).toBe(422);
    expect(await statusOf(createKey(owner.api, unchecked({ name: 'x', deployment_ids: mine, admin: true })))).toBe(422);
  });

  it('updates name, scope, expiry and status; revokes for good; refuses to change a revoked key with 409', async () => {
    const { data: created } = await createKey(owner.api, { name: 'before', deployment_ids: [deploymentIds[0] ?? ''] });
    const id = created?.api_key.id ?? 0;
    const expiresAt = new Date(Date.now() + 86_400_000).toISOString();
    const patched = await updateKey(owner.api, id, { name: 'after', deployment_ids: deploymentIds, expires_at: expiresAt, status: 'disabled' });
    expect(patched.response.status).toBe(200);
    expect(patched.data).toMatchObject({ name: 'after', status: 'disabled', expires_at: expiresAt });
    expect(patched.data?.deployments.map((d) => d.id).sort()).toEqual([...deploymentIds].sort());
    expect(await statusOf(updateKey(owner.api, id, { status: unchecked('revoked') }))).toBe(422);

    expect((await revokeKey(owner.api, id)).data).toMatchObject({ status: 'revoked', revoked_at: expect.any(String) });
    const again = await updateKey(owner.api, id, { status: 'active' });
    expect(again.response.status).toBe(409);
    expect(again.error?.code).toBe('API_KEY_REVOKED');
    expect((await revokeKey(owner.api, id)).data).toMatchObject({ status: 'revoked' });
  });

  it('answers 404 for another organization’s key', async () => {
    const { data: created } = await createKey(owner.api, { name: 'mine', deployment_ids: [deploymentIds[0] ?? ''] });
    const stranger = await registeredUser(app);
    expect(await statusOf(revokeKey(stranger.api, created?.api_key.id ?? 0))).toBe(404);
  });

  it('is for admins: a member is refused with 403', async () => {
    const members = await team(app);
    expect(await statusOf(members.member.api.GET('/v1/organization/api-keys'))).toBe(403);
    expect(await statusOf(members.admin.api.GET('/v1/organization/api-keys'))).toBe(200);
  });
});
