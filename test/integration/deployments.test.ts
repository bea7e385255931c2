import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { setModelEnabled } from '../../src/catalog/catalog.repository.ts';
import { registeredUser } from '../factories/accounts.ts';
import { findDeployment } from '../../src/deployments/deployments.repository.ts';
import { insertDeployment } from '../../src/deployments/deployment-changes.ts';
import { deployment, type Deployment } from '../factories/deployments.ts';
import { team } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import type { Api } from '../helpers/browser.ts';
import { statusOf, unchecked } from '../helpers/http.ts';

let app: TestApp;
beforeAll(async () => {
  // No workers and no cluster: deployments stay `requested`; provisioning is tested in provisioning.test.ts.
  app = await startTestApp();
});
afterAll(() => app.close());

type CreateDeploymentRequest = components['schemas']['CreateDeploymentRequest'];
const create = (api: Api, body: CreateDeploymentRequest) => api.POST('/api/v1/model-deployments', { body });
const get = (api: Api, id: string) => api.GET('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: id } } });
const list = (api: Api, query: { limit?: number; offset?: number; after?: string } = {}) => api.GET('/api/v1/model-deployments', { params: { query } });

describe('creating a deployment', () => {
  it('stores it as requested, with the catalog defaults filled in', async () => {
    const { api, user } = await registeredUser(app);
    const { data, response } = await create(api, { model_name: 'qwen2.5-instruct' });
    expect(response.status).toBe(201);
    expect(data).toMatchObject({
      status: 'requested',
      user_id: String(user.id),
      model_name: 'qwen2.5-instruct',
      model_format: 'pytorch',
      model_size_in_billions: 0.5,
      quantization: 'none',
      cluster_id: null,
      engine_model_uid: null,
      failure_stage: null,
      terminated_at: null,
    });
  });

  it.each([[7], ['7'], [7.0], ['14']])('accepts model_size_in_billions %j', async (size) => {
    const { api } = await registeredUser(app);
    const { data, response } = await create(api, { model_name: 'qwen2.5-instruct', model_format: 'awq', model_size_in_billions: size });
    expect(response.status).toBe(201);
    expect(data?.model_size_in_billions).toBe(Number(size));
  });

  it.each([
    [{ model_name: 'not-a-model' }, /not in the catalog/],
    [{ model_name: 'qwen2.5-instruct', model_format: 'onnx' }, /model_format "onnx" is not offered/],
    [{ model_name: 'qwen2.5-instruct', model_size_in_billions: 9 }, /size 9B is not offered/],
    [{ model_name: 'qwen2.5-instruct', model_format: 'awq', quantization: 'Int8' }, /quantization "Int8" is not offered/],
  ])('refuses %o with 422 MODEL_NOT_DEPLOYABLE', async (body, detail) => {
    const { api } = await registeredUser(app);
    const { error, response } = await create(api, body);
    expect(response.status).toBe(422);
    expect(error?.code).toBe('MODEL_NOT_DEPLOYABLE');
    expect(error?.detail).toMatch(detail);
  });

  it('refuses a disabled model', async () => {
    const { api } = await registeredUser(app);
    await setModelEnabled(app.db, 'gemma-3-it', false);
    try {
      expect((await create(api, { model_name: 'gemma-3-it' })).error?.code).toBe('MODEL_NOT_DEPLOYABLE');
    } finally {
      await setModelEnabled(app.db, 'gemma-3-it', true);
    }
  });

  it.each([
    [{ model_name: 'qwen2.5-instruct', gpu: 'h100' }, 'body/gpu'],
    [{ model_name: '' }, 'body/model_name'],
    [{}, 'body/model_name'],
    [{ model_name: 'qwen2.5-instruct', model_size_in_billions: 'seven' }, 'body/model_size_in_billions'],
  ])('refuses the invalid body %o with 422 VALIDATION_FAILED', async (body, location) => {
    const { api } = await registeredUser(app);
    const { error, response } = await create(api, unchecked(body));
    expect(response.status).toBe(422);
    expect(error?.code).toBe('VALIDATION_FAILED');
    expect(error?.errors?.map((e) => e.location)).toContain(location);
  });

  it('stops at the billing account’s max_active_resources with 409, even for concurrent creates', async () => {
    const { api } = await registeredUser(app);
    const organizationId = (await api.GET('/v1/organization')).data?.id;
    // The limit comes with the billing plan, which nothing sets yet (billing answers 501): written here.
    await app.db('billing_accounts').where({ organization_id: organizationId }).update({ max_active_resources: 2 });
    const answers = await Promise.all(Array.from({ length: 6 }, () => create(api, { model_name: 'mistral-instruct-v0.3' })));
    expect(answers.map((a) => a.response.status).sort()).toEqual([201, 201, 409, 409, 409, 409]);
    expect(answers.find((a) => a.response.status === 409)?.error?.code).toBe('ACTIVE_DEPLOYMENT_LIMIT_REACHED');
    expect(await app.db('deployments').where({ organization_id: organizationId }).count({ n: '*' })).toEqual([{ n: '2' }]);
  });

  it('counts neither failed nor terminated deployments against the limit', async () => {
    const owner = await registeredUser(app);
    for (const state of ['failed', 'terminated', 'failed', 'terminated', 'failed'] as const) await deployment(app, owner, state);
    const active = await Promise.all(Array.from({ length: 5 }, () => create(owner.api, { model_name: 'qwen2.5-instruct' })));
    expect(active.map((a) => a.response.status)).toEqual([201, 201, 201, 201, 201]);
    expect((await create(owner.api, { model_name: 'qwen2.5-instruct' })).error?.code).toBe('ACTIVE_DEPLOYMENT_LIMIT_REACHED');
  });

  it('needs the role member: a viewer is refused with 403', async () => {
    const members = await team(app);
    expect(await statusOf(create(members.viewer.api, { model_name: 'qwen2.5-instruct' }))).toBe(403);
    expect(await statusOf(create(members.member.api, { model_name: 'qwen2.5-instruct' }))).toBe(201);
    expect(await statusOf(list(members.viewer.api))).toBe(200);
  });
});

describe('listing and reading deployments', () => {
  it('pages through the caller’s deployments, newest first', async () => {
    const owner = await registeredUser(app);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await deployment(app, owner, 'requested')).id);

    const { data: first } = await list(owner.api, { limit: 2 });
    expect(first).toMatchObject({ total: 5, limit: 2, offset: 0, next_cursor: expect.any(String) });
    expect(first?.items.map((d) => d.id)).toEqual([ids[4], ids[3]]);
    const { data: last } = await list(owner.api, { limit: 2, offset: 4 });
    expect(last?.items.map((d) => d.id)).toEqual([ids[0]]);
    expect(last?.next_cursor).toBeNull();
    expect((await list(owner.api)).data).toMatchObject({ total: 5, limit: 100, offset: 0, next_cursor: null });
  });

  it.each([{ limit: 0 }, { limit: 501 }, { offset: -1 }, { limit: unchecked('ten') }])('refuses %o with 422', async (query) => {
    const { api } = await registeredUser(app);
    expect(await statusOf(list(api, query))).toBe(422);
  });

  it('shows each caller only their own: another user gets 404 and an empty list', async () => {
    const owner = await registeredUser(app);
    const stranger = await registeredUser(app);
    const created = await deployment(app, owner, 'requested');
    expect(await statusOf(get(owner.api, created.id))).toBe(200);
    const { error, response } = await get(stranger.api, created.id);
    expect(response.status).toBe(404);
    expect(error?.code).toBe('NOT_FOUND');
    expect(await statusOf(stranger.api.DELETE('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: created.id } } }))).toBe(404);
    expect((await list(stranger.api)).data).toMatchObject({ items: [], total: 0 });
  });

  it('answers 422 for an id that is not a UUID (the path parameter is format uuid) and 404 for an unknown UUID', async () => {
    const { api } = await registeredUser(app);
    expect(await statusOf(get(api, 'not-a-uuid'))).toBe(422);
    expect(await statusOf(get(api, '0192f1c6-2b9e-7c4e-9b1a-5d0c8e6f7a21'))).toBe(404);
  });

  it('shows each state the API can report, with what went wrong for a failed one', async () => {
    const owner = await registeredUser(app);
    const states = ['requested', 'provisioning', 'starting', 'failed', 'terminating', 'terminated'] as const;
    const made = [];
    for (const state of states) made.push(await deployment(app, owner, state));
    expect(made.map((d) => d.status)).toEqual(states);
    expect(made[3]).toMatchObject({ failure_stage: 'model_launch', failure_reason: expect.any(String) });
    expect(made[5]?.terminated_at).toEqual(expect.any(String));
    const { data } = await list(owner.api);
    expect(data?.items.map((d) => d.status).reverse()).toEqual(states);
  });
});

describe('walking the deployments with the cursor', () => {
  /** An owner whose organization may hold many active deployments (the default limit is 5). */
  async function ownerOfMany() {
    const owner = await registeredUser(app);
    const organizationId = (await owner.api.GET('/v1/organization')).data?.id;
    await app.db('billing_accounts').where({ organization_id: organizationId }).update({ max_active_resources: 1000 });
    return owner;
  }

  /** `count` deployments like `like` stored in one transaction: they share its `created_at` (now()), so only their ids order them. */
  async function sameInstant(like: Deployment, count: number): Promise<string[]> {
    const row = await findDeployment(app.db, like.id);
    if (!row) throw new Error('no deployment');
    const { user_id, organization_id, deployable_model_id, model_name, model_format, model_size_in_billions, quantization, model_engine } = row;
    const copy = { user_id, organization_id, deployable_model_id, model_name, model_format, model_size_in_billions, quantization, model_engine };
    return app.db.transaction(async (trx) => {
      const ids: string[] = [];
      for (let i = 0; i < count; i++) ids.push((await insertDeployment(trx, copy)).id);
      return ids;
    });
  }

  /** Every page from `after` on, `limit` at a time, calling `between` after each page; the ids in order and the pages. */
  async function walk(api: Api, limit: number, between: () => Promise<unknown> = async () => {}) {
    const ids: string[] = [];
    const pages: Array<{ total: number; next_cursor: string | null; size: number }> = [];
    let after: string | undefined;
    do {
      const { data, error } = await list(api, { limit, ...(after === undefined ? {} : { after }) });
      if (!data) throw new Error(JSON.stringify(error));
      ids.push(...data.items.map((d) => d.id));
      pages.push({ total: data.total, next_cursor: data.next_cursor, size: data.items.length });
      expect(data.offset).toBe(0);
      after = data.next_cursor ?? undefined;
      await between();
    } while (after !== undefined && pages.length < 50);
    return { ids, pages };
  }

  it('gives every deployment exactly once, newest first, even when deployments are created during the walk', async () => {
    const owner = await ownerOfMany();
    const first = await deployment(app, owner, 'requested');
    const tied = await sameInstant(first, 4);
    const later: string[] = [];
    for (const state of ['requested', 'terminated', 'requested'] as const) later.push((await deployment(app, owner, state)).id);
    const everything = (await list(owner.api)).data?.items.map((d) => d.id) ?? [];
    expect(everything.slice(0, 3)).toEqual(later.reverse());
    expect(new Set(everything.slice(3))).toEqual(new Set([first.id, ...tied]));

    const created: string[] = [];
    const { ids, pages } = await walk(owner.api, 3, async () => created.push((await deployment(app, owner, 'requested')).id));
    expect(ids).toEqual(everything);
    expect(ids.filter((id) => created.includes(id))).toEqual([]);
    expect(pages.map((page) => page.size)).toEqual([3, 3, 2]);
    expect(pages.at(-1)?.next_cursor).toBeNull();
    // `total` is exact on every page: it counts the deployments created since the walk began.
    expect(pages.map((page) => page.total)).toEqual([8, 9, 10]);
    expect((await list(owner.api, { limit: 1 })).data?.total).toBe(8 + created.length);
  });

  it('orders deployments created in the same instant by id, and a page boundary between them loses none', async () => {
    const owner = await ownerOfMany();
    const first = await deployment(app, owner, 'requested');
    await sameInstant(first, 5);
    const everything = (await list(owner.api)).data?.items ?? [];
    expect(everything.slice(0, 5).map((d) => d.created_at)).toEqual(Array(5).fill(everything[0]?.created_at));
    expect(everything.slice(0, 5).map((d) => d.id)).toEqual(everything.slice(0, 5).map((d) => d.id).sort().reverse());
    for (const limit of [1, 2, 4]) expect((await walk(owner.api, limit)).ids).toEqual(everything.map((d) => d.id));
  });

  it('continues an offset page with its next_cursor', async () => {
    const owner = await ownerOfMany();
    for (let i = 0; i < 6; i++) await deployment(app, owner, 'requested');
    const everything = (await list(owner.api)).data?.items.map((d) => d.id) ?? [];
    const { data: middle } = await list(owner.api, { limit: 2, offset: 2 });
    expect(middle?.items.map((d) => d.id)).toEqual(everything.slice(2, 4));
    const { data: next } = await list(owner.api, { limit: 10, after: middle?.next_cursor ?? '' });
    expect(next).toMatchObject({ total: 6, limit: 10, offset: 0, next_cursor: null });
    expect(next?.items.map((d) => d.id)).toEqual(everything.slice(4));
  });

  it('refuses after together with a non-zero offset with 422 VALIDATION_FAILED, and accepts offset 0', async () => {
    const owner = await ownerOfMany();
    for (let i = 0; i < 3; i++) await deployment(app, owner, 'requested');
    const cursor = (await list(owner.api, { limit: 1 })).data?.next_cursor ?? '';
    const { error, response } = await list(owner.api, { after: cursor, offset: 1 });
    expect(response.status).toBe(422);
    expect(error).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ location: 'query/offset' }] });
    expect((await list(owner.api, { after: cursor, offset: 0 })).data?.items).toHaveLength(2);
  });

  it("refuses a malformed or altered cursor, or one from another user's list, with 422 VALIDATION_FAILED and shows nothing of the other list", async () => {
    const owner = await ownerOfMany();
    const members = await team(app);
    for (let i = 0; i < 3; i++) await deployment(app, owner, 'requested');
    await deployment(app, members.member, 'requested');
    const cursor = (await list(owner.api, { limit: 1 })).data?.next_cursor ?? '';
    const [payload = '', tag = ''] = cursor.split('.');
    const flip = (text: string, at: number) => `${text.slice(0, at)}${text[at] === 'A' ? 'B' : 'A'}${text.slice(at + 1)}`;
    const refused = [
      'x',
      'not-a-cursor',
      `${payload}.`,
      `.${tag}`,
      `${payload}.${tag}.${tag}`,
      `${flip(payload, 5)}.${tag}`,
      `${payload}.${flip(tag, 0)}`,
      `${payload.slice(0, -2)}.${tag}`,
      Buffer.from('{"created_at":"2026-11-20T09:30:00Z","id":"0192f1c6-2b9e-7c4e-9b1a-5d0c8e6f7a21"}').toString('base64url'),
      "'; select pg_sleep(1); --",
    ];
    for (const after of refused) {
      const { error, response } = await list(owner.api, { after });
      expect(response.status, after).toBe(422);
      expect(error).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ location: 'query/after' }] });
    }
    // Another user, even one of the same organization, cannot use it: their own list is theirs alone.
    for (const stranger of [members.member, await registeredUser(app)]) {
      const { error, response } = await list(stranger.api, { after: cursor });
      expect(response.status).toBe(422);
      expect(error?.errors?.[0]?.location).toBe('query/after');
    }
    expect((await list(members.member.api)).data?.total).toBe(1);
    // Longer than the contract allows: refused by the schema, the same way.
    expect(await statusOf(list(owner.api, { after: 'a'.repeat(201) }))).toBe(422);
  });

  it('keeps total exact under concurrent creates', async () => {
    const owner = await ownerOfMany();
    const created = await Promise.all(Array.from({ length: 8 }, () => create(owner.api, { model_name: 'qwen2.5-instruct' })));
    expect(created.map((c) => c.response.status)).toEqual(Array(8).fill(201));
    expect((await list(owner.api, { limit: 1 })).data?.total).toBe(8);
  });

  it('keeps total exact when a removed member’s deployments pass to the admin who removed them', async () => {
    const members = await team(app);
    await deployment(app, members.admin, 'requested');
    for (let i = 0; i < 2; i++) await deployment(app, members.member, 'requested');
    expect((await list(members.admin.api)).data?.total).toBe(1);
    const removed = await members.admin.api.DELETE('/v1/organization/members/{user_id}', { params: { path: { user_id: members.member.user.id } } });
    expect(removed.response.status).toBe(204);
    const { data } = await list(members.admin.api);
    expect(data?.total).toBe(3);
    expect(data?.items).toHaveLength(3);
  });
});
