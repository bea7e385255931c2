import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registeredUser } from '../factories/accounts.ts';
import { team } from '../factories/organizations.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import type { Browser } from '../helpers/browser.ts';
import { jsonOf, type Deployment, type Problem } from '../helpers/http.ts';


let app: TestApp;
beforeAll(async () => {
  // No cluster here: deployments stay `requested` or fail; provisioning is tested in provisioning.test.ts.
  app = await startTestApp({ ...FAST_PROVISIONING, RECONCILE_INTERVAL_SECONDS: '3600', DEPLOYMENT_STUCK_AFTER_SECONDS: '3600' });
  await app.container.boss.offWork('provision-deployment');
});
afterAll(() => app.close());

const create = (browser: Browser, body: Record<string, unknown>) => browser.post('/api/v1/model-deployments', body);
const codeOf = async (response: Response) => (await jsonOf<Problem>(response)).code;

describe('creating a deployment', () => {
  it('stores it as requested, with the catalog defaults filled in', async () => {
    const { browser, user } = await registeredUser(app);
    const response = await create(browser, { model_name: 'qwen2.5-instruct' });
    expect(response.status).toBe(201);
    expect(await jsonOf(response)).toMatchObject({
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
    const { browser } = await registeredUser(app);
    const response = await create(browser, { model_name: 'qwen2.5-instruct', model_format: 'awq', model_size_in_billions: size });
    expect(response.status).toBe(201);
    expect((await jsonOf<Deployment>(response)).model_size_in_billions).toBe(Number(size));
  });

  it.each([
    [{ model_name: 'not-a-model' }, /not in the catalog/],
    [{ model_name: 'qwen2.5-instruct', model_format: 'onnx' }, /model_format "onnx" is not offered/],
    [{ model_name: 'qwen2.5-instruct', model_size_in_billions: 9 }, /size 9B is not offered/],
    [{ model_name: 'qwen2.5-instruct', model_format: 'awq', quantization: 'Int8' }, /quantization "Int8" is not offered/],
  ])('refuses %o with 422 MODEL_NOT_DEPLOYABLE', async (body, detail) => {
    const { browser } = await registeredUser(app);
    const response = await create(browser, body);
    expect(response.status).toBe(422);
    const problem = await jsonOf<Problem>(response);
    expect(problem.code).toBe('MODEL_NOT_DEPLOYABLE');
    expect(problem.detail).toMatch(detail);
  });

  it('refuses a disabled model', async () => {
    const { browser } = await registeredUser(app);
    await app.db('deployable_models').where({ model_name: 'gemma-3-it' }).update({ enabled: false });
    try {
      expect(await codeOf(await create(browser, { model_name: 'gemma-3-it' }))).toBe('MODEL_NOT_DEPLOYABLE');
    } finally {
      await app.db('deployable_models').where({ model_name: 'gemma-3-it' }).update({ enabled: true });
    }
  });

  it.each([
    [{ model_name: 'qwen2.5-instruct', gpu: 'h100' }, 'body/gpu'],
    [{ model_name: '' }, 'body/model_name'],
    [{}, 'body/model_name'],
    [{ model_name: 'qwen2.5-instruct', model_size_in_billions: 'seven' }, 'body/model_size_in_billions'],
  ])('refuses the invalid body %o with 422 VALIDATION_FAILED', async (body, location) => {
    const { browser } = await registeredUser(app);
    const response = await create(browser, body);
    expect(response.status).toBe(422);
    const problem = await jsonOf<Problem>(response);
    expect(problem.code).toBe('VALIDATION_FAILED');
    expect(problem.errors?.map((e) => e.location)).toContain(location);
  });

  it('stops at the billing account’s max_active_resources with 409, even for concurrent creates', async () => {
    const { browser } = await registeredUser(app);
    const organizationId = (await jsonOf<{ id: number }>(await browser.get('/v1/organization'))).id;
    await app.db('billing_accounts').where({ organization_id: organizationId }).update({ max_active_resources: 2 });
    const responses = await Promise.all(Array.from({ length: 6 }, () => create(browser, { model_name: 'mistral-instruct-v0.3' })));
    const statuses = responses.map((r) => r.status).sort();
    expect(statuses).toEqual([201, 201, 409, 409, 409, 409]);
    const refused = responses.find((r) => r.status === 409);
    expect(await codeOf(refused as Response)).toBe('ACTIVE_DEPLOYMENT_LIMIT_REACHED');
    expect(await app.db('deployments').where({ organization_id: organizationId }).count({ n: '*' })).toEqual([{ n: '2' }]);
  });

  it('needs the role member: a viewer is refused with 403', async () => {
    const members = await team(app);
    expect((await create(members.viewer.browser, { model_name: 'qwen2.5-instruct' })).status).toBe(403);
    expect((await create(members.member.browser, { model_name: 'qwen2.5-instruct' })).status).toBe(201);
    expect((await members.viewer.browser.get('/api/v1/model-deployments')).status).toBe(200);
  });
});

describe('listing and reading deployments', () => {
  it('pages through the caller’s deployments, newest first', async () => {
    const { browser } = await registeredUser(app);
    const organizationId = (await jsonOf<{ id: number }>(await browser.get('/v1/organization'))).id;
    await app.db('billing_accounts').where({ organization_id: organizationId }).update({ max_active_resources: 10 });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await jsonOf<Deployment>(await create(browser, { model_name: 'qwen2.5-instruct' }))).id);

    const first = await jsonOf<{ items: Deployment[]; total: number; limit: number; offset: number }>(
      await browser.get('/api/v1/model-deployments?limit=2'),
    );
    expect(first).toMatchObject({ total: 5, limit: 2, offset: 0 });
    expect(first.items.map((d) => d.id)).toEqual([ids[4], ids[3]]);
    const last = await jsonOf<{ items: Deployment[] }>(await browser.get('/api/v1/model-deployments?limit=2&offset=4'));
    expect(last.items.map((d) => d.id)).toEqual([ids[0]]);
    expect(await jsonOf(await browser.get('/api/v1/model-deployments'))).toMatchObject({ total: 5, limit: 100, offset: 0 });
  });

  it.each(['limit=0', 'limit=501', 'offset=-1', 'limit=ten'])('refuses %s with 422', async (query) => {
    const { browser } = await registeredUser(app);
    expect((await browser.get(`/api/v1/model-deployments?${query}`)).status).toBe(422);
  });

  it('shows each caller only their own: another user gets 404 and an empty list', async () => {
    const owner = await registeredUser(app);
    const stranger = await registeredUser(app);
    const created = await jsonOf<Deployment>(await create(owner.browser, { model_name: 'qwen2.5-instruct' }));
    expect((await owner.browser.get(`/api/v1/model-deployments/${created.id}`)).status).toBe(200);
    const response = await stranger.browser.get(`/api/v1/model-deployments/${created.id}`);
    expect(response.status).toBe(404);
    expect(await codeOf(response)).toBe('NOT_FOUND');
    expect((await stranger.browser.delete(`/api/v1/model-deployments/${created.id}`)).status).toBe(404);
    expect(await jsonOf(await stranger.browser.get('/api/v1/model-deployments'))).toMatchObject({ items: [], total: 0 });
  });

  it('answers 404 for an id that is not a deployment id', async () => {
    const { browser } = await registeredUser(app);
    expect((await browser.get('/api/v1/model-deployments/not-a-uuid')).status).toBe(404);
  });
});
