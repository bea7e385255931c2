import type OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { apiKey } from '../factories/api-keys.ts';
import { deployment, type Deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { inferenceClient } from '../helpers/inference-client.ts';
import { waitUntil } from '../helpers/net.ts';

type CreateDeploymentRequest = components['schemas']['CreateDeploymentRequest'];
type DeploymentEvent = components['schemas']['DeploymentEvent'];
type Replicas = components['schemas']['DeploymentReplicas'];

/**
 * Elastic deployments end to end on the cluster simulator, through the HTTP interface: the
 * autoscaler adds replicas on load and drains them when it falls, a deployment with `min_replicas`
 * 0 releases its GPUs when idle and wakes on a request held through its cold start, and the holds
 * are bounded and timed. The autoscaler runs every 0.2 s here, its cool-down is 1 s.
 */
let app: TestApp;
let owner: SignedInUser;
const MAX_HELD = 3;

beforeAll(async () => {
  app = await startTestApp(
    { ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50', AUTOSCALER_INTERVAL_SECONDS: '0.2', SCALE_DOWN_COOLDOWN_SECONDS: '1', COLD_START_MAX_HELD_REQUESTS: String(MAX_HELD) },
    { workers: true, cluster: { modelLoadMs: 300, tokenLatencyMs: 20 } },
  );
  owner = await registeredUser(app);
});
afterAll(() => app.close());

/** Each test's deployments are deleted after it: the GPUs they hold are the next test's. */
const created: string[] = [];
afterEach(async () => {
  const ids = created.splice(0);
  for (const id of ids) await owner.api.DELETE('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: id } } });
  for (const id of ids) await waitUntil(async () => (await activeAllocations(id)) === 0, `deployment ${id}'s GPUs released`);
});

/** A running deployment of the owner's, deleted after the test. */
async function running(body: CreateDeploymentRequest): Promise<Deployment> {
  const d = await deployment(app, owner, 'running', body);
  created.push(d.id);
  return d;
}

const QWEN: CreateDeploymentRequest = { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 };

async function read(id: string): Promise<Deployment> {
  const { data } = await owner.api.GET('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: id } } });
  if (!data) throw new Error(`deployment ${id} not found`);
  return data;
}

/** Waits until the deployment shows these replica counts. */
async function untilReplicas(id: string, wanted: Partial<Replicas>, timeoutMs = 20_000): Promise<Deployment> {
  let seen: Deployment | undefined;
  await waitUntil(
    async () => {
      seen = await read(id);
      return Object.entries(wanted).every(([field, count]) => seen?.replicas[field as keyof Replicas] === count);
    },
    () => `replicas ${JSON.stringify(wanted)} (last seen ${JSON.stringify(seen?.replicas)})`,
    timeoutMs,
  );
  return seen as Deployment;
}

/** The deployment's `deployment.scaled` events, oldest first (as its event stream and webhooks carry them). */
async function scaleEvents(id: string): Promise<NonNullable<DeploymentEvent['scale']>[]> {
  return app.db('deployment_events').where({ deployment_id: id, type: 'deployment.scaled' }).orderBy('id').pluck('scale');
}

const activeAllocations = async (id: string) => (await app.db('gpu_allocations').where({ deployment_id: id, status: 'active' })).length;
const meteredReplicas = async (id: string) => (await app.db('deployment_replicas').where({ deployment_id: id }).whereIn('status', ['ready', 'draining'])).length;

async function clientFor(d: Deployment, options: { maxRetries?: number } = {}): Promise<OpenAI> {
  return inferenceClient(app, (await apiKey(owner, [d.id])).key, options);
}

/** A chat completion streamed to its end: its text and finish reason, or the error it failed with. */
async function streamed(client: OpenAI, model: string, maxTokens: number): Promise<{ text: string; finish: string | null | undefined }> {
  const stream = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Tell me a long story' }], stream: true, max_tokens: maxTokens });
  let text = '';
  let finish: string | null | undefined;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? '';
    finish ??= chunk.choices[0]?.finish_reason;
  }
  return { text, finish };
}

function simulator() {
  if (!app.simulator) throw new Error('no simulator');
  return app.simulator;
}

/** Runs `test` with the simulator's model load time (and token latency) set, restoring them after. */
async function withEngine(settings: { modelLoadMs?: number; tokenLatencyMs?: number }, test: () => Promise<void>): Promise<void> {
  if (settings.modelLoadMs !== undefined) simulator().setModelLoadMs(settings.modelLoadMs);
  if (settings.tokenLatencyMs !== undefined) simulator().setTokenLatencyMs(settings.tokenLatencyMs);
  try {
    await test();
  } finally {
    simulator().setModelLoadMs(300);
    simulator().setTokenLatencyMs(20);
  }
}

/** Every stream ended with a finish reason: none failed or was cut off. */
function allFinished(answers: ReadonlyArray<{ finish: string | null | undefined }>): void {
  for (const answer of answers) expect(answer.finish).toMatch(/^(stop|length)$/);
}

describe('replicas on load', () => {
  it('adds replicas at once when the requests in flight exceed the target, and drains them after the cool-down once the load falls', async () => {
    const d = await running({ ...QWEN, min_replicas: 1, max_replicas: 3, target_concurrency: 2 });
    expect(d.replicas).toEqual({ desired: 1, ready: 1, starting: 0, draining: 0 });
    const client = await clientFor(d);

    await withEngine({ tokenLatencyMs: 150 }, async () => {
      // Six streams of tokens at 150 ms for seconds: six requests in flight, three replicas' worth.
      const load = Array.from({ length: 6 }, () => streamed(client, d.id, 30));
      const scaled = await untilReplicas(d.id, { desired: 3, ready: 3 });
      expect(await activeAllocations(d.id)).toBe(3);
      expect(scaled.status).toBe('running');
      const more = await Promise.all(Array.from({ length: 3 }, () => streamed(client, d.id, 2)));
      allFinished([...(await Promise.all(load)), ...more]);
    });

    await untilReplicas(d.id, { desired: 1, ready: 1, draining: 0 });
    await waitUntil(async () => (await activeAllocations(d.id)) === 1, 'the drained replicas\' GPUs released');
    const events = await scaleEvents(d.id);
    expect(events.filter((e) => e.reason === 'load' && e.to > e.from).at(-1)?.to).toBe(3);
    expect(events.at(-1)).toEqual({ from: 3, to: 1, reason: 'load' });
    // Each replica was metered from the second it served until the second it stopped.
    const replicas = await app.db('deployment_replicas').where({ deployment_id: d.id }).orderBy('ordinal');
    expect(replicas.map((r) => r.status)).toEqual(['ready', 'stopped', 'stopped']);
    for (const replica of replicas.slice(1)) expect(replica.running_until.getTime()).toBeGreaterThanOrEqual(replica.running_since.getTime());
  });

  it('drains a replica taken out while it serves: the requests on it finish, new ones go elsewhere, none fails', async () => {
    const d = await running({ ...QWEN, min_replicas: 3, max_replicas: 3, target_concurrency: 1 });
    await untilReplicas(d.id, { ready: 3 });
    const client = await clientFor(d);
    const ready = await app.db('deployment_replicas').where({ deployment_id: d.id, status: 'ready' }).pluck('id');
    await withEngine({ tokenLatencyMs: 150 }, async () => {
      const load = Array.from({ length: 6 }, () => streamed(client, d.id, 30));
      await waitUntil(async () => ready.every((replica) => app.container.deploymentLoad.inFlightOn(d.id, replica) > 0), 'a request in flight on every replica');

      const patched = await owner.api.PATCH('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: d.id } }, body: { min_replicas: 1, max_replicas: 1 } });
      expect(patched.response.status).toBe(200);
      expect(patched.data?.replicas.desired).toBe(1);
      await untilReplicas(d.id, { ready: 1, draining: 2 });
      // Requests sent while two replicas drain all go to the one left, and are answered.
      const during = await Promise.all(Array.from({ length: 4 }, () => streamed(client, d.id, 2)));
      allFinished([...(await Promise.all(load)), ...during]);
      // The drained replicas served to the end: their models were stopped only after.
      expect(simulator().abortedRequests).toBe(0);
    });
    await untilReplicas(d.id, { ready: 1, draining: 0 });
    expect(await activeAllocations(d.id)).toBe(1);
    expect((await scaleEvents(d.id)).at(-1)).toEqual({ from: 3, to: 1, reason: 'settings' });
  });
});

describe('a replica that fails', () => {
  it('is stopped with its GPUs released and an event that says why, while the deployment serves on', async () => {
    const d = await running({ ...QWEN, min_replicas: 1, max_replicas: 2, target_concurrency: 1 });
    const client = await clientFor(d);
    simulator().failNextLaunch('oom');
    await withEngine({ tokenLatencyMs: 150 }, async () => {
      const load = Array.from({ length: 2 }, () => streamed(client, d.id, 30));
      await waitUntil(async () => (await scaleEvents(d.id)).some((e) => e.reason === 'replica_failed'), 'a replica_failed event');
      allFinished(await Promise.all(load));
    });
    const failed = await app.db('deployment_events').where({ deployment_id: d.id, type: 'deployment.scaled' }).whereRaw("scale->>'reason' = 'replica_failed'").first('message');
    expect(failed?.message).toMatch(/CUDA out of memory/);
    await waitUntil(async () => (await app.db('deployment_replicas').where({ deployment_id: d.id, ordinal: 1 }).first('status'))?.status === 'stopped', 'the failed replica stopped');
    expect((await read(d.id)).status).toBe('running');
    expect(await activeAllocations(d.id)).toBeLessThanOrEqual(2);
    const released = await app.db('gpu_allocations as a').join('deployment_replicas as r', 'r.gpu_allocation_id', 'a.id').where({ 'r.deployment_id': d.id, 'r.ordinal': 1 }).first('a.status');
    expect(released?.status).toBe('released');
  });
});

describe('a replica the engine loses', () => {
  it('is replaced while the other replicas serve: the deployment stays running', async () => {
    const d = await running({ ...QWEN, min_replicas: 2, max_replicas: 2 });
    await untilReplicas(d.id, { ready: 2 });
    const lost = await app.db('deployment_replicas').where({ deployment_id: d.id, ordinal: 1 }).first('id', 'engine_model_uid');
    expect(simulator().crash(lost.engine_model_uid, { recover: false })).toBe(true);
    await waitUntil(async () => (await scaleEvents(d.id)).some((e) => e.reason === 'replica_failed'), 'a replica_failed event');
    await untilReplicas(d.id, { ready: 2, starting: 0 });
    const replicas = await app.db('deployment_replicas').where({ deployment_id: d.id }).orderBy('ordinal').select('ordinal', 'status');
    expect(replicas.find((r) => r.ordinal === 1)?.status).toMatch(/^(stopped|failed)$/);
    expect(replicas.filter((r) => r.status === 'ready').map((r) => r.ordinal)).toEqual([0, 2]);
    expect((await read(d.id)).status).toBe('running');
  });
});

describe('a deployment of several replicas', () => {
  it('is deleted whole: every replica’s model stopped on the engine and all its GPUs released', async () => {
    const d = await running({ ...QWEN, min_replicas: 3, max_replicas: 3 });
    await untilReplicas(d.id, { ready: 3 });
    const uids = await app.db('deployment_replicas').where({ deployment_id: d.id }).pluck('engine_model_uid');
    expect(uids).toHaveLength(3);
    expect((await owner.api.DELETE('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: d.id } } })).response.status).toBe(200);
    await waitUntil(async () => (await read(d.id)).status === 'terminated', 'terminated');
    expect(await activeAllocations(d.id)).toBe(0);
    expect(simulator().running().filter((uid) => uids.includes(uid))).toEqual([]);
    expect(await app.db('deployment_replicas').where({ deployment_id: d.id }).pluck('status')).toEqual(['stopped', 'stopped', 'stopped']);
  });
});

describe('guards on scaling up', () => {
  it('adds no replica while the organization’s spending limit is reached, and an event says so', async () => {
    const d = await running({ ...QWEN, min_replicas: 1, max_replicas: 2, target_concurrency: 1 });
    const limit = (monthly_spending_limit: string | null) => owner.api.PUT('/v1/billing/spending-limit', { body: { monthly_spending_limit, currency: 'usd' } });
    expect((await limit('0')).response.status).toBe(200);
    try {
      const client = await clientFor(d);
      await withEngine({ tokenLatencyMs: 150 }, async () => {
        const load = Array.from({ length: 3 }, () => streamed(client, d.id, 30));
        await waitUntil(async () => (await scaleEvents(d.id)).some((e) => e.reason === 'spending_limit'), 'a spending_limit scale event');
        expect((await read(d.id)).replicas).toMatchObject({ desired: 2, ready: 1, starting: 0 });
        expect(await activeAllocations(d.id)).toBe(1);
        allFinished(await Promise.all(load));
      });
    } finally {
      await limit(null);
    }
  });
});

describe('scale to zero', () => {
  it('releases the last replica after the idle time (no GPU held, none metered) and wakes on the next request, held until a replica is ready', async () => {
    const d = await running({ ...QWEN, min_replicas: 0, max_replicas: 1, scale_to_zero_after_seconds: 1 });
    const atZero = await untilReplicas(d.id, { desired: 0, ready: 0, draining: 0 });
    expect(atZero.status).toBe('running');
    expect(await activeAllocations(d.id)).toBe(0);
    expect(await meteredReplicas(d.id)).toBe(0);

    const client = await clientFor(d);
    const answer = await client.chat.completions.create({ model: d.id, messages: [{ role: 'user', content: 'wake up' }], max_tokens: 3 });
    expect(answer.choices[0]?.finish_reason).toBe('length');
    expect(answer.model).toBe(d.id);
    expect((await read(d.id)).replicas).toMatchObject({ desired: 1, ready: 1 });
    const events = await scaleEvents(d.id);
    expect(events.slice(-2)).toEqual([
      { from: 1, to: 0, reason: 'idle' },
      { from: 0, to: 1, reason: 'request' },
    ]);
  });

  it('answers 503 deployment_not_running with Retry-After past X-Scale-Up-Timeout, and the openai client, retrying, gets the answer once a replica is ready', async () => {
    const d = await running({ ...QWEN, min_replicas: 0, max_replicas: 1, scale_to_zero_after_seconds: 1 });
    await untilReplicas(d.id, { desired: 0, ready: 0, draining: 0 });
    // Woken, it stays up longer than the client's retries take (Retry-After 5 s between them).
    const patched = await owner.api.PATCH('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: d.id } }, body: { scale_to_zero_after_seconds: 60 } });
    expect(patched.data?.replicas.desired).toBe(0);
    await withEngine({ modelLoadMs: 2_000 }, async () => {
      const key = (await apiKey(owner, [d.id])).key;
      const refused = await fetch(`${app.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-scale-up-timeout': '0' },
        body: JSON.stringify({ model: d.id, messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(refused.status).toBe(503);
      expect(refused.headers.get('retry-after')).toBe('5');
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('deployment_not_running');

      // The refused request woke it: the client's next attempts, each held 1 s at most, get the answer.
      const retrying = inferenceClient(app, key, { maxRetries: 3 });
      const answer = await retrying.chat.completions.create({ model: d.id, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }, { headers: { 'X-Scale-Up-Timeout': '1' } });
      expect(answer.choices[0]?.finish_reason).toBe('length');
    });
  });

  it(`holds at most ${MAX_HELD} requests per deployment in a process during a cold start: one more answers 503 at once, the held ones are answered`, async () => {
    const d = await running({ ...QWEN, min_replicas: 0, max_replicas: 1, scale_to_zero_after_seconds: 1 });
    await untilReplicas(d.id, { desired: 0, ready: 0, draining: 0 });
    await withEngine({ modelLoadMs: 1_000 }, async () => {
      const client = await clientFor(d);
      const held = Array.from({ length: MAX_HELD }, () => client.chat.completions.create({ model: d.id, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }));
      await waitUntil(async () => app.container.deploymentLoad.heldFor(d.id) === MAX_HELD, `${MAX_HELD} requests held`);
      const refused = await client.chat.completions.create({ model: d.id, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }).catch((error: unknown) => error);
      expect(refused).toMatchObject({ status: 503, code: 'deployment_not_running' });
      for (const answer of await Promise.all(held)) expect(answer.choices[0]?.finish_reason).toBe('length');
    });
  });
});
