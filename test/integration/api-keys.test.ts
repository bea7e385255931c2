import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken } from '../../src/crypto.ts';
import { registeredUser } from '../factories/accounts.ts';
import { team } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import type { Browser } from '../helpers/browser.ts';
import { jsonOf, type Problem } from '../helpers/http.ts';

interface ApiKey {
  id: number;
  name: string;
  key_prefix: string;
  status: string;
  expires_at: string | null;
  revoked_at: string | null;
  deployments: Array<{ id: string; model_name: string; status: string }>;
}

let app: TestApp;
let owner: Awaited<ReturnType<typeof registeredUser>>;
let deploymentIds: string[];

beforeAll(async () => {
  app = await startTestApp();
  await app.container.boss.offWork('provision-deployment');
  owner = await registeredUser(app);
  deploymentIds = [];
  for (const model_name of ['qwen2.5-instruct', 'mistral-instruct-v0.3']) {
    deploymentIds.push((await jsonOf<{ id: string }>(await owner.browser.post('/api/v1/model-deployments', { model_name }))).id);
  }
});
afterAll(() => app.close());

const createKey = (browser: Browser, body: Record<string, unknown>) => browser.post('/v1/organization/api-keys', body);

describe('API key management', () => {
  it('creates a key shown once, stores only its hash, and lists only its prefix', async () => {
    const response = await createKey(owner.browser, { name: 'ci', deployment_ids: [deploymentIds[0]] });
    expect(response.status).toBe(201);
    const { key, api_key } = await jsonOf<{ key: string; api_key: ApiKey }>(response);
    expect(key).toMatch(/^svc-sk-[0-9A-Za-z]{38}$/);
    expect(api_key).toMatchObject({ name: 'ci', status: 'active', key_prefix: key.slice(0, 15), expires_at: null, revoked_at: null });
    expect(api_key.deployments).toEqual([{ id: deploymentIds[0], model_name: 'qwen2.5-instruct', status: 'requested' }]);
    const stored = await app.db('api_keys').where({ id: api_key.id }).first();
    expect(stored.key_hash).toBe(hashToken(key));
    expect(JSON.stringify(stored)).not.toContain(key);
    const listed = await (await owner.browser.get('/v1/organization/api-keys')).text();
    expect(listed).toContain(api_key.key_prefix);
    expect(listed).not.toContain(key);
  });

  it('offers the organization’s deployments that are not terminated', async () => {
    const response = await owner.browser.get('/v1/organization/api-keys/deployment-options');
    const { items } = await jsonOf<{ items: Array<{ id: string }> }>(response);
    expect(items.map((d) => d.id).sort()).toEqual([...deploymentIds].sort());
  });

  it('refuses a scope outside the organization, a past expiry and unknown fields with 422', async () => {
    const stranger = await registeredUser(app);
    const theirs = (await jsonOf<{ id: string }>(await stranger.browser.post('/api/v1/model-deployments', { model_name: 'qwen2.5-instruct' }))).id;
    const outside = await createKey(owner.browser, { name: 'x', deployment_ids: [theirs] });
    expect(outside.status).toBe(422);
    expect((await jsonOf<Problem>(outside)).errors?.[0]?.location).toBe('body/deployment_ids');
    expect((await createKey(owner.browser, { name: 'x', deployment_ids: [deploymentIds[0]], expires_at: '2020-01-01T00:00:00Z' })).status).toBe(422);
    expect((await createKey(owner.browser, { name: 'x', deployment_ids: [] })).status).toBe(422);
    expect((await createKey(owner.browser, { name: 'x', deployment_ids: [deploymentIds[0]], admin: true })).status).toBe(422);
  });

  it('updates name, scope, expiry and status; revokes for good; refuses to change a revoked key with 409', async () => {
    const { api_key } = await jsonOf<{ api_key: ApiKey }>(await createKey(owner.browser, { name: 'before', deployment_ids: [deploymentIds[0]] }));
    const expiresAt = new Date(Date.now() + 86_400_000).toISOString();
    const patched = await owner.browser.patch(`/v1/organization/api-keys/${api_key.id}`, {
      name: 'after',
      deployment_ids: deploymentIds,
      expires_at: expiresAt,
      status: 'disabled',
    });
    expect(patched.status).toBe(200);
    const updated = await jsonOf<ApiKey>(patched);
    expect(updated).toMatchObject({ name: 'after', status: 'disabled', expires_at: expiresAt });
    expect(updated.deployments.map((d) => d.id).sort()).toEqual([...deploymentIds].sort());
    expect((await owner.browser.patch(`/v1/organization/api-keys/${api_key.id}`, { status: 'revoked' })).status).toBe(422);

    const revoked = await owner.browser.delete(`/v1/organization/api-keys/${api_key.id}`);
    expect(await jsonOf(revoked)).toMatchObject({ status: 'revoked', revoked_at: expect.any(String) });
    const again = await owner.browser.patch(`/v1/organization/api-keys/${api_key.id}`, { status: 'active' });
    expect(again.status).toBe(409);
    expect((await jsonOf<Problem>(again)).code).toBe('API_KEY_REVOKED');
    expect(await jsonOf(await owner.browser.delete(`/v1/organization/api-keys/${api_key.id}`))).toMatchObject({ status: 'revoked' });
  });

  it('answers 404 for another organization’s key', async () => {
    const { api_key } = await jsonOf<{ api_key: ApiKey }>(await createKey(owner.browser, { name: 'mine', deployment_ids: [deploymentIds[0]] }));
    const stranger = await registeredUser(app);
    expect((await stranger.browser.delete(`/v1/organization/api-keys/${api_key.id}`)).status).toBe(404);
  });

  it('is for admins: a member is refused with 403', async () => {
    const members = await team(app);
    expect((await members.member.browser.get('/v1/organization/api-keys')).status).toBe(403);
    expect((await members.admin.browser.get('/v1/organization/api-keys')).status).toBe(200);
  });
});
