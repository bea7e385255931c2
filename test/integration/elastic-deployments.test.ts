import { createParser } from 'eventsource-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment, untilStatus } from '../factories/deployments.ts';
import { team } from '../factories/organizations.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import type { Api } from '../helpers/browser.ts';
import { statusOf, unchecked } from '../helpers/http.ts';

/**
 * Elastic deployments through the management API: the scaling settings on create (stored, shown,
 * validated), the instance type asked for (honoured by provisioning), PATCH of the settings (a
 * `deployment.scaled` event, its webhook delivery, the fields fixed at creation), and the plan's
 * `scaling`. The cluster simulator has one instance each of g5.12xlarge (4 x A10G), g6e.12xlarge
 * (4 x L40S) and p5.48xlarge (8 x H100).
 */
type CreateDeploymentRequest = components['schemas']['CreateDeploymentRequest'];
type UpdateDeploymentRequest = components['schemas']['UpdateDeploymentRequest'];
type DeploymentEvent = components['schemas']['DeploymentEvent'];

/** With workers and the cluster: deployments are provisioned. */
let app: TestApp;
/** With the cluster and no workers: deployments stay where the test puts them. */
let quiet: TestApp;

beforeAll(async () => {
  const env = { ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50', WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' };
  [app, quiet] = await Promise.all([startTestApp(env, { workers: true, cluster: { modelLoadMs: 100 } }), startTestApp(env, { cluster: { modelLoadMs: 100 } })]);
});
afterAll(async () => {
  await Promise.all([app?.close(), quiet?.close()]);
});

const create = (api: Api, body: CreateDeploymentRequest) => api.POST('/api/v1/model-deployments', { body });
const get = (api: Api, id: string) => api.GET('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: id } } });
const update = (api: Api, id: string, body: UpdateDeploymentRequest) => api.PATCH('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: id } }, body });
const plan = (api: Api, body: CreateDeploymentRequest) => api.POST('/api/v1/model-deployments/plan', { body });

/** The deployment's events from its stream's history, read until `done` holds of them. */
async function eventsUntil(user: SignedInUser, id: string, done: (events: DeploymentEvent[]) => boolean): Promise<DeploymentEvent[]> {
  const events: DeploymentEvent[] = [];
  const abort = new AbortController();
  const response = await user.browser.fetch(`/api/v1/model-deployments/${id}/events`, { signal: abort.signal });
  expect(response.status).toBe(200);
  const parser = createParser({ onEvent: (event) => event.event !== 'end' && events.push(JSON.parse(event.data) as DeploymentEvent) });
  const decoder = new TextDecoder();
  try {
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      parser.feed(decoder.decode(chunk, { stream: true }));
      if (done(events)) break;
    }
  } finally {
    abort.abort();
  }
  return events;
}

describe('scaling settings on create', () => {
  it('stores the settings sent and shows them, with the replicas wanted, on create, get and list', async () => {
    const owner = await registeredUser(quiet);
    const body = { model_name: 'qwen2.5-instruct', min_replicas: 2, max_replicas: 5, target_concurrency: 8, scale_to_zero_after_seconds: 60, instance_type: 'g6e.12xlarge' };
    const { data: created, response } = await create(owner.api, body);
    expect(response.status).toBe(201);
    const shown = {
      min_replicas: 2,
      max_replicas: 5,
      target_concurrency: 8,
      scale_to_zero_after_seconds: 60,
      instance_type: 'g6e.12xlarge',
      replicas: { desired: 2, ready: 0, starting: 0, draining: 0 },
    };
    expect(created).toMatchObject(shown);
    expect((await get(owner.api, created?.id ?? '')).data).toMatchObject(shown);
    const listed = await owner.api.GET('/api/v1/model-deployments');
    expect(listed.response.status, JSON.stringify(listed.error)).toBe(200);
    expect(listed.data?.items[0]).toMatchObject({ id: created?.id, ...shown });
  });

  it('keeps one fixed replica without settings, and defaults max_replicas to min_replicas, or 1 at min 0', async () => {
    const owner = await registeredUser(quiet);
    expect((await create(owner.api, { model_name: 'qwen2.5-instruct' })).data).toMatchObject({
      min_replicas: 1,
      max_replicas: 1,
      target_concurrency: 4,
      scale_to_zero_after_seconds: 900,
      instance_type: null,
      replicas: { desired: 1, ready: 0, starting: 0, draining: 0 },
    });
    expect((await create(owner.api, { model_name: 'qwen2.5-instruct', min_replicas: 3 })).data).toMatchObject({ min_replicas: 3, max_replicas: 3, replicas: { desired: 3 } });
    expect((await create(owner.api, { model_name: 'qwen2.5-instruct', min_replicas: 0 })).data).toMatchObject({ min_replicas: 0, max_replicas: 1, replicas: { desired: 1 } });
  });

  it('refuses max_replicas below min_replicas with 422 VALIDATION_FAILED at body/max_replicas, on create and on plan', async () => {
    const owner = await registeredUser(quiet);
    for (const answer of [await create(owner.api, { model_name: 'qwen2.5-instruct', min_replicas: 3, max_replicas: 2 }), await plan(owner.api, { model_name: 'qwen2.5-instruct', min_replicas: 3, max_replicas: 2 })]) {
      expect(answer.response.status).toBe(422);
      expect(answer.error).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ location: 'body/max_replicas' }] });
    }
    expect((await owner.api.GET('/api/v1/model-deployments')).data?.total).toBe(0);
  });

  it.each([
    [{ min_replicas: 65 }, 'body/min_replicas'],
    [{ max_replicas: 0 }, 'body/max_replicas'],
    [{ target_concurrency: 1025 }, 'body/target_concurrency'],
    [{ scale_to_zero_after_seconds: 0 }, 'body/scale_to_zero_after_seconds'],
  ])('refuses %o out of bounds with 422 VALIDATION_FAILED', async (settings, location) => {
    const owner = await registeredUser(quiet);
    const { error, response } = await create(owner.api, { model_name: 'qwen2.5-instruct', ...settings });
    expect(response.status).toBe(422);
    expect(error?.errors?.map((e) => e.location)).toContain(location);
  });

  it('refuses an instance type no registered cluster offers with 422 VALIDATION_FAILED naming those offered', async () => {
    const owner = await registeredUser(quiet);
    const { error, response } = await create(owner.api, { model_name: 'qwen2.5-instruct', instance_type: 'g4dn.xlarge' });
    expect(response.status).toBe(422);
    expect(error).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ location: 'body/instance_type' }] });
    expect(error?.detail).toContain('g5.12xlarge, g6e.12xlarge, p5.48xlarge');
  });
});

describe('the instance type asked for', () => {
  it('is the one provisioning places the deployment on, though another is cheaper', async () => {
    const owner = await registeredUser(app);
    const cheapest = await registeredUser(app);
    const asked = await deployment(app, owner, 'running', { model_name: 'qwen2.5-instruct', instance_type: 'g6e.12xlarge' });
    expect(asked).toMatchObject({ instance_type: 'g6e.12xlarge', selected_instance_type: 'g6e.12xlarge', replicas: { desired: 1, ready: 1, starting: 0, draining: 0 } });
    expect(asked.selection_reason).toMatch(/^g6e\.12xlarge is the instance type asked for/);
    const chosen = await deployment(app, cheapest, 'running', { model_name: 'qwen2.5-instruct' });
    expect(chosen).toMatchObject({ instance_type: null, selected_instance_type: 'g5.12xlarge' });
    for (const [user, id] of [[owner, asked.id], [cheapest, chosen.id]] as const) {
      await user.api.DELETE('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: id } } });
      await untilStatus(user, id, 'terminated');
    }
  });
});

describe('PATCH of a deployment', () => {
  it('changes the scaling settings of a running deployment, records deployment.scaled with reason settings, and queues its webhook delivery', async () => {
    const owner = await registeredUser(app);
    const { data: endpoint } = await owner.api.POST('/v1/organization/webhook-endpoints', { body: { url: 'http://127.0.0.1:9/hooks', event_types: ['deployment.scaled'] } });
    const running = await deployment(app, owner, 'running');
    const { data, response } = await update(owner.api, running.id, { min_replicas: 3, max_replicas: 4, target_concurrency: 2 });
    expect(response.status).toBe(200);
    expect(data).toMatchObject({ status: 'running', min_replicas: 3, max_replicas: 4, target_concurrency: 2, scale_to_zero_after_seconds: 900, replicas: { desired: 3, ready: 1 } });

    const events = await eventsUntil(owner, running.id, (seen) => seen.some((event) => event.type === 'deployment.scaled'));
    expect(events.find((event) => event.type === 'deployment.scaled')).toMatchObject({
      to_status: 'running',
      from_status: null,
      scale: { from: 1, to: 3, reason: 'settings' },
      message: 'Scaled from 1 to 3 replicas: min_replicas is now 3.',
    });
    expect(events.filter((event) => event.type !== 'deployment.scaled').every((event) => event.scale === null)).toBe(true);
    // The endpoint takes only deployment.scaled: the event's delivery is queued for it, and nothing else.
    const deliveries = await app.db('webhook_deliveries').where({ endpoint_id: endpoint?.endpoint.id }).select('event_type', 'event_id');
    expect(deliveries).toEqual([{ event_type: 'deployment.scaled', event_id: String(events.find((event) => event.type === 'deployment.scaled')?.id) }]);

    // Lowering max_replicas below the desired count brings it down; a change within the bounds records nothing.
    expect((await update(owner.api, running.id, { min_replicas: 1, max_replicas: 2 })).data?.replicas.desired).toBe(2);
    expect((await update(owner.api, running.id, { scale_to_zero_after_seconds: 30 })).data).toMatchObject({ scale_to_zero_after_seconds: 30, replicas: { desired: 2 } });
    const scaled = (await eventsUntil(owner, running.id, (seen) => seen.filter((event) => event.type === 'deployment.scaled').length >= 2)).filter((event) => event.type === 'deployment.scaled');
    expect(scaled.map((event) => [event.scale, event.message])).toEqual([
      [{ from: 1, to: 3, reason: 'settings' }, 'Scaled from 1 to 3 replicas: min_replicas is now 3.'],
      [{ from: 3, to: 2, reason: 'settings' }, 'Scaled from 3 to 2 replicas: max_replicas is now 2.'],
    ]);
    await owner.api.DELETE('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: running.id } } });
    await untilStatus(owner, running.id, 'terminated');
  });

  it('refuses a field fixed at creation with another value with 422 VALIDATION_FAILED naming each, and accepts the same value', async () => {
    const owner = await registeredUser(quiet);
    const created = await deployment(quiet, owner, 'requested', { model_name: 'qwen2.5-instruct', instance_type: 'g5.12xlarge' });
    const { error, response } = await update(owner.api, created.id, { min_replicas: 2, max_replicas: 2, model_format: 'awq', model_size_in_billions: 7, instance_type: 'p5.48xlarge' });
    expect(response.status).toBe(422);
    expect(error?.code).toBe('VALIDATION_FAILED');
    expect(error?.errors?.map((e) => e.location)).toEqual(['body/model_format', 'body/model_size_in_billions', 'body/instance_type']);
    expect(error?.errors?.[0]?.message).toMatch(/fixed at creation/);
    expect((await get(owner.api, created.id)).data).toMatchObject({ min_replicas: 1, max_replicas: 1 });

    const same = { model_name: 'qwen2.5-instruct', model_format: 'pytorch', model_size_in_billions: '0.5', quantization: 'none', instance_type: 'g5.12xlarge', max_replicas: 2 };
    const { data, response: accepted } = await update(owner.api, created.id, same);
    expect(accepted.status).toBe(200);
    expect(data).toMatchObject({ max_replicas: 2, replicas: { desired: 1 } });
  });

  it('checks the bounds against the stored settings, and refuses an empty body or an unknown field', async () => {
    const owner = await registeredUser(quiet);
    const created = await deployment(quiet, owner, 'requested', { model_name: 'qwen2.5-instruct', min_replicas: 2, max_replicas: 4 });
    const below = await update(owner.api, created.id, { max_replicas: 1 });
    expect(below.response.status).toBe(422);
    expect(below.error).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ location: 'body/max_replicas', message: 'max_replicas (1) must be at least min_replicas (2)' }] });
    const above = await update(owner.api, created.id, { min_replicas: 5 });
    expect(above.error).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ location: 'body/min_replicas' }] });
    for (const body of [{}, { replicas: 3 }]) {
      const { error, response } = await update(owner.api, created.id, unchecked(body));
      expect(response.status).toBe(422);
      expect(error?.code).toBe('VALIDATION_FAILED');
    }
    expect((await get(owner.api, created.id)).data).toMatchObject({ min_replicas: 2, max_replicas: 4, replicas: { desired: 2 } });
  });

  it('answers 409 DEPLOYMENT_DELETION_PENDING while the deployment is terminating, and 422 once it is failed or terminated', async () => {
    const owner = await registeredUser(quiet);
    const terminating = await deployment(quiet, owner, 'terminating');
    const { error, response } = await update(owner.api, terminating.id, { max_replicas: 2 });
    expect(response.status).toBe(409);
    expect(error?.code).toBe('DEPLOYMENT_DELETION_PENDING');
    for (const state of ['failed', 'terminated'] as const) {
      const stopped = await deployment(quiet, owner, state);
      const answer = await update(owner.api, stopped.id, { max_replicas: 2 });
      expect(answer.response.status).toBe(422);
      expect(answer.error).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ location: 'path/deployment_id', message: `is ${state}: its settings no longer change` }] });
      expect((await get(owner.api, stopped.id)).data?.max_replicas).toBe(1);
    }
  });

  it('needs the role member and the CSRF token, and answers 404 for another user’s deployment', async () => {
    const members = await team(quiet);
    const created = await deployment(quiet, members.member, 'requested');
    expect(await statusOf(update(members.viewer.api, created.id, { max_replicas: 2 }))).toBe(403);
    expect(await statusOf(update((await registeredUser(quiet)).api, created.id, { max_replicas: 2 }))).toBe(404);
    const withoutToken = await members.member.browser.fetch(`/api/v1/model-deployments/${created.id}`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json', 'x-csrf-token': '' },
      body: JSON.stringify({ max_replicas: 2 }),
    });
    expect(withoutToken.status).toBe(403);
    expect(await statusOf(update(members.member.api, created.id, { max_replicas: 2 }))).toBe(200);
  });
});

describe('the plan’s scaling', () => {
  it('prices min_replicas and max_replicas on the chosen option, and says max_replicas fits when the cluster holds it', async () => {
    const owner = await registeredUser(quiet);
    const { data } = await plan(owner.api, { model_name: 'qwen2.5-instruct', model_size_in_billions: 7, min_replicas: 0, max_replicas: 3 });
    const hourly = Number(data?.estimated_cost?.hourly_amount);
    expect(data?.placement.selected_instance_type).toBe('g5.12xlarge');
    expect(data?.scaling).toMatchObject({
      min_replicas: 0,
      max_replicas: 3,
      at_min: { replicas: 0, hourly_amount: '0', thirty_day_amount: '0.00', currency: 'usd' },
      at_max: { replicas: 3, currency: 'usd' },
      max_replicas_fit: true,
      max_replicas_fit_reason: 'The free GPUs of g5.12xlarge on the chosen cluster hold 3 replicas of 1 x A10G now.',
    });
    expect(Number(data?.scaling.at_max?.hourly_amount)).toBeCloseTo(hourly * 3, 3);
    expect(Number(data?.scaling.at_max?.thirty_day_amount)).toBeCloseTo(Number(data?.estimated_cost?.thirty_day_amount) * 3, 1);
  });

  it('says max_replicas does not fit when the chosen instance type’s free GPUs on its cluster hold fewer replicas', async () => {
    const owner = await registeredUser(quiet);
    // The g5.12xlarge instance has 4 A10G GPUs (the hosted models may hold some): 5 replicas of one GPU never fit.
    const { data } = await plan(owner.api, { model_name: 'qwen2.5-instruct', model_size_in_billions: 7, min_replicas: 1, max_replicas: 5 });
    expect(data?.scaling).toMatchObject({ min_replicas: 1, max_replicas: 5, max_replicas_fit: false, at_min: { replicas: 1, hourly_amount: data?.estimated_cost?.hourly_amount } });
    expect(data?.scaling.max_replicas_fit_reason).toMatch(/^The free GPUs of g5\.12xlarge on the chosen cluster do not hold 5 replicas of 1 x A10G now/);
  });

  it('considers only the instance type asked for', async () => {
    const owner = await registeredUser(quiet);
    const { data } = await plan(owner.api, { model_name: 'qwen2.5-instruct', model_size_in_billions: 7, instance_type: 'p5.48xlarge', max_replicas: 8 });
    expect(data?.placement).toMatchObject({ selected_instance_type: 'p5.48xlarge', alternatives: [] });
    expect(data?.scaling).toMatchObject({ min_replicas: 1, max_replicas: 8, max_replicas_fit: true });
  });
});
