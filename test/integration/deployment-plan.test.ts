import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { unplaceableCombination, untilStatus, type Deployment } from '../factories/deployments.ts';
import { team } from '../factories/organizations.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import type { Api } from '../helpers/browser.ts';
import { changedTables, tableDigester } from '../helpers/db-digest.ts';
import { unchecked } from '../helpers/http.ts';

/**
 * POST /api/v1/model-deployments/plan: what create would do, decided by create's and
 * provisioning's own code, checked against what create and provisioning then do. Billing
 * enforcement is on; an account's processor state is written as the webhook job stores it.
 */
type CreateDeploymentRequest = components['schemas']['CreateDeploymentRequest'];
type DeploymentPlan = components['schemas']['DeploymentPlan'];

/** With workers and the cluster simulator (4 x A10G, 4 x L40S, 8 x H100): plans are compared with provisioning. */
let app: TestApp;
/** Without workers: nothing moves in the background, so a plan writing anything would show. */
let quiet: TestApp;

beforeAll(async () => {
  const env = { ...FAST_PROVISIONING, BILLING_ENFORCEMENT: 'true', MAX_ACTIVE_RESOURCES: '50' };
  [app, quiet] = await Promise.all([
    startTestApp(env, { workers: true, cluster: { modelLoadMs: 300 } }),
    startTestApp(env, { cluster: { modelLoadMs: 300 } }),
  ]);
});
afterAll(async () => {
  await Promise.all([app?.close(), quiet?.close()]);
});

const planOf = (api: Api, body: CreateDeploymentRequest) => api.POST('/api/v1/model-deployments/plan', { body });
const create = (api: Api, body: CreateDeploymentRequest) => api.POST('/api/v1/model-deployments', { body });
const remove = (api: Api, id: string) => api.DELETE('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: id } } });

async function plan(api: Api, body: CreateDeploymentRequest): Promise<DeploymentPlan> {
  const { data, error, response } = await planOf(api, body);
  expect(response.status, JSON.stringify(error)).toBe(200);
  return data as DeploymentPlan;
}

async function organizationOf(on: TestApp, user: SignedInUser): Promise<number> {
  const id = (await user.api.GET('/v1/organization')).data?.id;
  if (!id) throw new Error('no organization');
  return id;
}

async function setAccount(on: TestApp, organizationId: number, values: Record<string, unknown>): Promise<void> {
  await on.db('billing_accounts').where({ organization_id: organizationId }).update(values);
}

/** A default card and an active subscription (subscription ids are unique: one per organization). */
const paidUp = (organizationId: number) => ({
  default_payment_method_id: 'pm_card_visa',
  subscription_status: 'active',
  processor_subscription_id: `sub_plan_${organizationId}`,
});

/** An owner whose organization passes every guard. */
async function payingOwner(on: TestApp = app): Promise<SignedInUser & { organizationId: number }> {
  const owner = await registeredUser(on);
  const organizationId = await organizationOf(on, owner);
  await setAccount(on, organizationId, paidUp(organizationId));
  return { ...owner, organizationId };
}

/** Hosted-model tokens at qwen2.5-instruct's price (0.0000003 USD a token): `dollars` of estimated spending. */
async function spend(on: TestApp, organizationId: number, dollars: number): Promise<void> {
  await on.db('usage_records').insert({
    request_id: `plan-${organizationId}-${dollars}`,
    organization_id: organizationId,
    route: '/v1/chat/completions',
    model: 'qwen2.5-instruct',
    unit: 'token',
    quantity: Math.round(dollars / 0.0000003),
  });
}

/** Creates as planned and follows the deployment until provisioning placed it (running) or failed it. */
async function createAndProvision(owner: SignedInUser, body: CreateDeploymentRequest, until: 'running' | 'failed'): Promise<Deployment> {
  const { data, error, response } = await create(owner.api, body);
  expect(response.status, JSON.stringify(error)).toBe(201);
  return untilStatus(owner, (data as Deployment).id, until, 20_000).catch(async (failure: unknown) => {
    if (until === 'running') throw failure;
    const { data: failed } = await owner.api.GET('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: (data as Deployment).id } } });
    if (failed?.status !== 'failed') throw failure;
    return failed;
  });
}

describe('planning a deployment against what provisioning then does', () => {
  it.each<[string, CreateDeploymentRequest, string, number]>([
    ['the catalog default (0.5B)', { model_name: 'qwen2.5-instruct' }, 'g5.12xlarge', 1],
    ['a 7B model', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 }, 'g5.12xlarge', 1],
    ['a 72B model on four GPUs', { model_name: 'qwen2.5-instruct', model_size_in_billions: 72 }, 'g6e.12xlarge', 4],
  ])('chooses for %s the instance type and reason the deployment gets', async (_what, body, instanceType, gpus) => {
    const owner = await payingOwner();
    const planned = await plan(owner.api, body);
    expect(planned.placement).toMatchObject({ selected_instance_type: instanceType, chosen: { instance_type: instanceType, gpu_count: gpus, available_now: true } });
    expect(planned.would_be_refused).toBeNull();

    const running = await createAndProvision(owner, body, 'running');
    expect(running.selected_instance_type).toBe(planned.placement.selected_instance_type);
    expect(running.selection_reason).toBe(planned.placement.selection_reason);
    expect(running.cluster_id).toBe(planned.placement.chosen?.cluster_id);
    expect({
      model_name: running.model_name,
      model_format: running.model_format,
      model_size_in_billions: running.model_size_in_billions,
      quantization: running.quantization,
    }).toEqual({
      model_name: planned.launch.model_name,
      model_format: planned.launch.model_format,
      model_size_in_billions: planned.launch.model_size_in_billions,
      quantization: planned.launch.quantization,
    });
    await remove(owner.api, running.id);
    await untilStatus(owner, running.id, 'terminated', 20_000);
  });

  it('prices the chosen instance type and its alternatives as their GPU seconds are billed, and shows availability, not the GPUs another organization takes', async () => {
    const owner = await payingOwner();
    const body = { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 };
    const before = await plan(owner.api, body);
    expect(before.launch).toEqual({
      model_name: 'qwen2.5-instruct',
      model_engine: 'vLLM',
      model_format: 'pytorch',
      model_size_in_billions: 7,
      quantization: 'none',
      required_gpu_memory_gb: 18.8,
    });
    const chosen = before.placement.chosen;
    expect(chosen?.hourly_price).toBe('1.418');
    expect(before.estimated_cost).toEqual({
      service_key: chosen?.service_key,
      unit_amount_decimal: '0.000393889',
      hourly_amount: '1.418',
      thirty_day_amount: '1020.96',
      currency: 'usd',
    });
    const price = await app.db('prices').where({ service_key: chosen?.service_key }).first('unit_amount_decimal');
    expect(Number(price?.unit_amount_decimal)).toBe(0.000393889);
    // Cheapest first: a share of the L40S instance, then of the H100 one.
    expect(before.placement.alternatives.map((a) => [a.instance_type, a.gpu_count, a.hourly_price, a.available_now])).toEqual([
      ['g6e.12xlarge', 1, '2.6232', true],
      ['p5.48xlarge', 1, '6.88', true],
    ]);
    expect(before.placement.failure_stage).toBeNull();

    const a10g = (p: DeploymentPlan) => p.capacity.find((c) => c.instance_type === 'g5.12xlarge');
    expect(a10g(before)).toMatchObject({ instances: 1, gpus: 4, gpu_memory_per_gpu_gb: 24, gpu_type: 'A10G', available_now: true });
    // Another organization takes one of the four A10Gs: this organization's plan shows the same.
    const other = await payingOwner();
    const running = await createAndProvision(other, body, 'running');
    const after = await plan(owner.api, body);
    expect(after.capacity).toEqual(before.capacity);
    expect(a10g(after)).toMatchObject({ available_now: true, free_gpus: 4, max_free_gpus_per_instance: 4 });
    const own = await createAndProvision(owner, body, 'running');
    expect((await plan(owner.api, body)).guards.find((g) => g.guard === 'active_deployment_limit')?.detail).toBe('Your organization has 1 of its 50 active deployments.');
    await remove(other.api, running.id);
    await remove(owner.api, own.id);
    await untilStatus(other, running.id, 'terminated', 20_000);
    await untilStatus(owner, own.id, 'terminated', 20_000);
  });

  it('says provisioning would fail at capacity when nothing that holds the model has room, as it then does', async () => {
    const owner = await payingOwner();
    // 72B in fp16 needs 174.8 GB: 4 of the 4 L40S, or 4 of the 8 H100. Room for three.
    const big = { model_name: 'qwen2.5-instruct', model_size_in_billions: 72 };
    const placed = [];
    for (let i = 0; i < 3; i++) placed.push(await createAndProvision(owner, big, 'running'));
    try {
      const planned = await plan(owner.api, big);
      expect(planned.placement).toMatchObject({
        selected_instance_type: null,
        selection_reason: null,
        chosen: null,
        failure_stage: 'capacity',
      });
      expect(planned.estimated_cost).toBeNull();
      expect(planned.would_be_refused).toBeNull();
      expect(planned.placement.alternatives.map((a) => [a.instance_type, a.gpu_count, a.available_now])).toEqual([
        ['g6e.12xlarge', 4, false],
        ['p5.48xlarge', 4, false],
      ]);
      // The A10Gs are free but cannot hold the model: nothing is available for it.
      expect(planned.capacity.map((c) => [c.instance_type, c.available_now, c.free_gpus, c.max_free_gpus_per_instance])).toEqual([
        ['g5.12xlarge', false, 0, 0],
        ['g6e.12xlarge', false, 0, 0],
        ['p5.48xlarge', false, 0, 0],
      ]);

      const failed = await createAndProvision(owner, big, 'failed');
      expect(failed).toMatchObject({ status: 'failed', failure_stage: 'capacity', failure_reason: planned.placement.failure_reason });
    } finally {
      for (const { id } of placed) await remove(owner.api, id);
      for (const { id } of placed) await untilStatus(owner, id, 'terminated', 20_000);
    }
  });

  it('says provisioning would fail at instance selection when no instance type holds the model, as it then does', async () => {
    const huge = await unplaceableCombination(app);
    const owner = await payingOwner();
    const planned = await plan(owner.api, huge);
    expect(planned.placement).toMatchObject({ chosen: null, alternatives: [], failure_stage: 'instance_selection' });
    expect(planned.capacity.length).toBeGreaterThan(0);
    const failed = await createAndProvision(owner, huge, 'failed');
    expect(failed).toMatchObject({ failure_stage: 'instance_selection', failure_reason: planned.placement.failure_reason });
  });
});

describe('the billing guards in a plan, against create', () => {
  /** The plan's refusal, then create's 409: the same code and detail. */
  async function expectSameRefusal(owner: SignedInUser, code: string, guard: string): Promise<void> {
    const body = { model_name: 'mistral-instruct-v0.3' };
    const planned = await plan(owner.api, body);
    const created = await create(owner.api, body);
    expect(created.response.status).toBe(409);
    expect(planned.would_be_refused).toEqual({ status: 409, code, detail: created.error?.detail });
    expect(created.error?.code).toBe(code);
    expect(planned.guards.find((g) => g.guard === guard)).toEqual({ guard, verdict: 'refused', code, detail: created.error?.detail });
  }

  it('reports PAYMENT_SETUP_INCOMPLETE as create answers it: without a card, then without an active subscription', async () => {
    const owner = await registeredUser(app);
    const organizationId = await organizationOf(app, owner);
    await expectSameRefusal(owner, 'PAYMENT_SETUP_INCOMPLETE', 'payment_setup');
    await setAccount(app, organizationId, { default_payment_method_id: 'pm_card_visa' });
    await expectSameRefusal(owner, 'PAYMENT_SETUP_INCOMPLETE', 'payment_setup');
    await setAccount(app, organizationId, { ...paidUp(organizationId), subscription_status: 'past_due' });
    await expectSameRefusal(owner, 'PAYMENT_SETUP_INCOMPLETE', 'payment_setup');
  });

  it('reports ACTIVE_DEPLOYMENT_LIMIT_REACHED as create answers it', async () => {
    const owner = await payingOwner();
    await setAccount(app, owner.organizationId, { max_active_resources: 0 });
    await expectSameRefusal(owner, 'ACTIVE_DEPLOYMENT_LIMIT_REACHED', 'active_deployment_limit');
  });

  it('reports SPENDING_LIMIT_REACHED as create answers it', async () => {
    const owner = await payingOwner();
    await setAccount(app, owner.organizationId, { monthly_spending_limit: '3.00' });
    await spend(app, owner.organizationId, 3);
    await expectSameRefusal(owner, 'SPENDING_LIMIT_REACHED', 'spending_limit');
  });

  it('gives every guard’s verdict, and create answers the first refusal', async () => {
    const owner = await registeredUser(app);
    const organizationId = await organizationOf(app, owner);
    await setAccount(app, organizationId, { max_active_resources: 0, monthly_spending_limit: '1.00' });
    await spend(app, organizationId, 1);
    const planned = await plan(owner.api, { model_name: 'mistral-instruct-v0.3' });
    expect(planned.guards.map((g) => [g.guard, g.verdict, g.code])).toEqual([
      ['payment_setup', 'refused', 'PAYMENT_SETUP_INCOMPLETE'],
      ['active_deployment_limit', 'refused', 'ACTIVE_DEPLOYMENT_LIMIT_REACHED'],
      ['spending_limit', 'refused', 'SPENDING_LIMIT_REACHED'],
    ]);
    const created = await create(owner.api, { model_name: 'mistral-instruct-v0.3' });
    expect(created.error?.code).toBe('PAYMENT_SETUP_INCOMPLETE');
    expect(planned.would_be_refused).toEqual({ status: 409, code: 'PAYMENT_SETUP_INCOMPLETE', detail: created.error?.detail });
  });

  it('passes every guard when create would accept, saying why', async () => {
    const owner = await payingOwner();
    await setAccount(app, owner.organizationId, { monthly_spending_limit: '10.00' });
    await spend(app, owner.organizationId, 2);
    const planned = await plan(owner.api, { model_name: 'mistral-instruct-v0.3' });
    expect(planned.would_be_refused).toBeNull();
    expect(planned.guards).toEqual([
      { guard: 'payment_setup', verdict: 'passed', code: null, detail: 'Your organization has a default payment method and an active subscription.' },
      { guard: 'active_deployment_limit', verdict: 'passed', code: null, detail: 'Your organization has 0 of its 50 active deployments.' },
      {
        guard: 'spending_limit',
        verdict: 'passed',
        code: null,
        detail: "Your organization's estimated spending this period (2.00 USD) is below its monthly limit of 10.00.",
      },
    ]);
  });
});

describe('what a plan writes, and who may plan', () => {
  it('writes nothing: no deployment, no job, no allocation, whatever the plan says', async () => {
    const owner = await payingOwner(quiet);
    const refused = await registeredUser(quiet);
    const digest = await tableDigester(quiet.db, []);
    const jobs = async () => Number((await quiet.db.withSchema('pgboss').from('job').count({ n: '*' }).first())?.n);
    const [tablesBefore, jobsBefore] = [await digest(), await jobs()];

    expect((await plan(owner.api, { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 })).placement.chosen).not.toBeNull();
    expect((await plan(refused.api, { model_name: 'qwen2.5-instruct' })).would_be_refused?.code).toBe('PAYMENT_SETUP_INCOMPLETE');
    expect((await planOf(owner.api, { model_name: 'not-a-model' })).response.status).toBe(422);

    expect(changedTables(tablesBefore, await digest())).toEqual([]);
    expect(await jobs()).toBe(jobsBefore);
  });

  it('lets members and above plan; a viewer gets 403 FORBIDDEN; no session 401', async () => {
    const members = await team(quiet);
    for (const role of ['member', 'admin', 'super_admin'] as const) {
      expect((await planOf(members[role].api, { model_name: 'qwen2.5-instruct' })).response.status).toBe(200);
    }
    const viewer = await planOf(members.viewer.api, { model_name: 'qwen2.5-instruct' });
    expect(viewer.response.status).toBe(403);
    expect(viewer.error?.code).toBe('FORBIDDEN');
    const anonymous = await fetch(`${quiet.url}/api/v1/model-deployments/plan`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model_name: 'qwen2.5-instruct' }),
    });
    expect(anonymous.status).toBe(401);
  });

  it('keeps /plan apart from the deployment ids: POST plans, GET reads the id `plan` and refuses it as not a UUID', async () => {
    const owner = await registeredUser(quiet);
    expect((await planOf(owner.api, { model_name: 'qwen2.5-instruct' })).response.status).toBe(200);
    const read = await owner.browser.fetch('/api/v1/model-deployments/plan');
    expect(read.status).toBe(422);
    expect(await read.json()).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ location: 'path/deployment_id' }] });
  });

  it.each([
    [{ model_name: 'not-a-model' }, /not in the catalog/],
    [{ model_name: 'qwen2.5-instruct', model_format: 'onnx' }, /model_format "onnx" is not offered/],
    [{ model_name: 'qwen2.5-instruct', model_size_in_billions: 9 }, /size 9B is not offered/],
  ])('refuses %o with 422 MODEL_NOT_DEPLOYABLE, as create does', async (body, detail) => {
    const owner = await payingOwner(quiet);
    const planned = await planOf(owner.api, body);
    const created = await create(owner.api, body);
    expect(planned.response.status).toBe(422);
    expect(planned.error).toMatchObject({ code: 'MODEL_NOT_DEPLOYABLE', detail: expect.stringMatching(detail) });
    expect(planned.error?.detail).toBe(created.error?.detail);
    expect(created.response.status).toBe(422);
  });

  it.each([
    [{ model_name: 'qwen2.5-instruct', gpu: 'h100' }, 'body/gpu'],
    [{}, 'body/model_name'],
    [{ model_name: 'qwen2.5-instruct', model_size_in_billions: 'seven' }, 'body/model_size_in_billions'],
  ])('refuses the invalid body %o with 422 VALIDATION_FAILED', async (body, location) => {
    const owner = await registeredUser(quiet);
    const { error, response } = await planOf(owner.api, unchecked(body));
    expect(response.status).toBe(422);
    expect(error?.code).toBe('VALIDATION_FAILED');
    expect(error?.errors?.map((e) => e.location)).toContain(location);
  });
});
