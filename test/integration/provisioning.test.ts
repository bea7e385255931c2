import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { METER_GPU_SECONDS_QUEUE } from '../../src/metering/gpu-metering.ts';
import { jobDefinitions } from '../../src/container.ts';
import { TERMINATE_QUEUE } from '../../src/deployments/provisioning.ts';
import { workOn } from '../../src/jobs/queue.ts';
import type { components } from '../../generated/api.d.ts';
import { registeredUser } from '../factories/accounts.ts';
import { unplaceableCombination, untilStatus, type Deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import type { Api } from '../helpers/browser.ts';
import { waitUntil } from '../helpers/net.ts';

type CreateDeploymentRequest = components['schemas']['CreateDeploymentRequest'];
type DeploymentStatus = components['schemas']['DeploymentStatus'];

let app: TestApp;
let owner: { api: Api };
beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' }, { workers: true, cluster: { modelLoadMs: 300 } });
  owner = await registeredUser(app);
});
afterAll(() => app.close());

const simulator = () => {
  if (!app.simulator) throw new Error('no simulator');
  return app.simulator;
};

/** The deployment as created (`requested`); the workers provision it from there. */
async function deploy(body: CreateDeploymentRequest): Promise<Deployment> {
  const { data, error, response } = await owner.api.POST('/api/v1/model-deployments', { body });
  expect(response.status, JSON.stringify(error)).toBe(201);
  return data as Deployment;
}

async function read(id: string): Promise<Deployment> {
  return (await owner.api.GET('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: id } } })).data as Deployment;
}

const remove = (id: string) => owner.api.DELETE('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: id } } });
const until = (id: string, status: DeploymentStatus) => untilStatus(owner, id, status, 20_000);

const activeAllocations = (deploymentId: string) => app.db('gpu_allocations').where({ deployment_id: deploymentId, status: 'active' });
const replicasOf = (deploymentId: string, on: TestApp = app) => on.db('deployment_replicas').where({ deployment_id: deploymentId }).orderBy('ordinal');
const allocationOf = (id: string, on: TestApp = app) => on.db('gpu_allocations').where({ id }).first('status', 'released_at');

type EngineModel = { model_uid: string; status: string; orphan: boolean; replicas: Array<{ routed: boolean }> };
const completedJob = (queue: string, deploymentId: string) =>
  app.db.withSchema('pgboss').from('job').where({ name: queue, state: 'completed' }).whereRaw("data->>'deploymentId' = ?", [deploymentId]).first('id');
const engineModelOf = (uid: string, sim = simulator()) => (sim.state().models as EngineModel[]).find((m) => m.model_uid === uid);

describe('provisioning on the cluster', () => {
  it('takes a deployment to running, with cluster, instance, allocation, engine uid and selection reason', async () => {
    const created = await deploy({ model_name: 'qwen2.5-instruct', model_size_in_billions: 7 });
    const running = await until(created.id, 'running');
    expect(running).toMatchObject({
      cluster_id: expect.any(String),
      instance_id: expect.any(String),
      gpu_allocation_id: expect.any(String),
      engine_model_uid: `dep-${created.id.replaceAll('-', '')}`,
      selected_instance_type: 'g5.12xlarge',
      failure_stage: null,
    });
    expect(running.selection_reason).toBe(
      'g5.12xlarge is the cheapest instance type with free capacity and at least 18.8 GB of GPU memory (1 x A10G, 24 GB) at $0.000394/s.',
    );
    expect(simulator().running()).toContain(running.engine_model_uid);
    expect(await activeAllocations(created.id)).toHaveLength(1);
    const launch = simulator().launches.find((l) => l.modelUid === running.engine_model_uid);
    expect(launch?.body).toMatchObject({ model_name: 'qwen2.5-instruct', model_format: 'pytorch', model_size_in_billions: 7, quantization: 'none', n_gpu: 1 });
  });

  it('terminates on delete: 409 while cleanup runs, then terminated with its GPUs free', async () => {
    const running = await until((await deploy({ model_name: 'mistral-instruct-v0.3' })).id, 'running');
    await app.container.boss.offWork(TERMINATE_QUEUE);
    const deleted = await remove(running.id);
    expect(deleted.response.status).toBe(200);
    expect(deleted.data).toMatchObject({ status: 'terminating' });
    const again = await remove(running.id);
    expect(again.response.status).toBe(409);
    expect(again.error?.code).toBe('DEPLOYMENT_DELETION_PENDING');

    const terminate = jobDefinitions(app.container).find((job) => job.queue === TERMINATE_QUEUE);
    if (!terminate) throw new Error('no terminate job');
    await workOn(app.container.boss, terminate, app.container.log);
    const terminated = await until(running.id, 'terminated');
    expect(terminated.terminated_at).not.toBeNull();
    expect(await activeAllocations(running.id)).toHaveLength(0);
    expect(simulator().running()).not.toContain(running.engine_model_uid);
    expect(simulator().gpus().filter((gpu) => gpu.heldBy?.startsWith(running.engine_model_uid ?? '-'))).toEqual([]);

    const once = await remove(running.id);
    expect(once.response.status).toBe(200);
    expect(once.data).toMatchObject({ status: 'terminated', terminated_at: terminated.terminated_at });
  });

  it('fails at the capacity stage when no instance with enough memory has free GPUs', async () => {
    // 72B in fp16 needs 174.8 GB: 4 of the 4 L40S (48 GB), or 4 of the 8 H100 (80 GB). Room for three.
    const placed: Deployment[] = [];
    for (let i = 0; i < 3; i++) placed.push(await until((await deploy({ model_name: 'qwen2.5-instruct', model_size_in_billions: 72 })).id, 'running'));
    expect(placed.map((d) => d.selected_instance_type).sort()).toEqual(['g6e.12xlarge', 'p5.48xlarge', 'p5.48xlarge']);
    const fourth = await until((await deploy({ model_name: 'qwen2.5-instruct', model_size_in_billions: 72 })).id, 'failed');
    expect(fourth).toMatchObject({ failure_stage: 'capacity', gpu_allocation_id: null, engine_model_uid: null });
    expect(fourth.failure_reason).toMatch(/174.8 GB/);
    for (const { id } of placed) await remove(id);
    for (const { id } of placed) await until(id, 'terminated');
  });

  it('fails at instance selection when no instance type can hold the model', async () => {
    const failed = await until((await deploy(await unplaceableCombination(app))).id, 'failed');
    expect(failed.failure_stage).toBe('instance_selection');
    expect(await replicasOf(failed.id)).toEqual([]);
  });

  it.each([
    ['error', 'model_launch', /Engine core initialization failed/],
    ['oom', 'capacity', /CUDA out of memory/],
  ] as const)('fails when the engine fails to load (%s): at %s, with the engine message, releasing the GPUs', async (kind, stage, reason) => {
    simulator().failNextLaunch(kind);
    const failed = await until((await deploy({ model_name: 'glm4-chat' })).id, 'failed');
    expect(failed.failure_stage).toBe(stage);
    expect(failed.failure_reason).toMatch(reason);
    expect(await activeAllocations(failed.id)).toHaveLength(0);
  });

  it('fails at model_launch a model the engine does not have, though it accepted the launch', async () => {
    // A launch combination the catalog does not offer (the catalog has no write path for them): added here.
    await app.db('model_specs').insert({
      deployable_model_id: app.db('deployable_models').where({ model_name: 'phi-3-mini-128k-instruct' }).select('id'),
      model_format: 'ggufv2',
      model_size_in_billions: 4,
      quantizations: ['Q4_K_M'],
      model_engine: 'llama.cpp',
    });
    const failed = await until((await deploy({ model_name: 'phi-3-mini-128k-instruct', model_format: 'ggufv2' })).id, 'failed');
    expect(failed).toMatchObject({ failure_stage: 'model_launch', failure_reason: expect.stringMatching(/^Model not found, name: phi-3-mini-128k-instruct, format: ggufv2/) });
    expect(await activeAllocations(failed.id)).toHaveLength(0);
  });

  it('runs a deployment only once its model answers, not when the engine reports the instance READY', async () => {
    simulator().setModelLoadMs(6000);
    const created = await deploy({ model_name: 'mistral-instruct-v0.3' });
    await until(created.id, 'starting');
    simulator().setModelLoadMs(300);
    const engineModel = () => engineModelOf(`dep-${created.id.replaceAll('-', '')}`);
    await waitUntil(async () => engineModel()?.status === 'READY', 'the engine to report the instance READY', 10_000);
    const seen = await read(created.id);
    // Read while the engine still loads: READY on the instance, its replica not routed yet.
    expect(engineModel()?.replicas[0]?.routed).toBe(false);
    expect(seen.status).toBe('starting');
    await until(created.id, 'running');
    expect(engineModel()?.replicas[0]?.routed).toBe(true);
    await remove(created.id);
    await until(created.id, 'terminated');
  });

  it('waits out a launch in progress before deleting it, and frees the GPUs only once the engine confirms the model gone', async () => {
    simulator().setModelLoadMs(6000);
    const created = await deploy({ model_name: 'qwen2.5-instruct', model_size_in_billions: 3 });
    const starting = await until(created.id, 'starting');
    simulator().setModelLoadMs(300);
    const uid = starting.engine_model_uid as string;
    const cancels = simulator().requests['POST /v1/models/{model_uid}/cancel'] ?? 0;
    expect((await remove(created.id)).response.status).toBe(200);
    // The cleanup step has looked at the engine at least once (and found the model loading).
    await waitUntil(async () => Boolean(await completedJob(TERMINATE_QUEUE, created.id)), 'a terminate step to complete');
    const allocations = await activeAllocations(created.id);
    const status = (await read(created.id)).status;
    // Read while the engine still loads the model: the GPUs stay ours, the deployment terminating.
    expect(engineModelOf(uid)?.replicas[0]?.routed).toBe(false);
    expect(allocations).toHaveLength(1);
    expect(status).toBe('terminating');
    await until(created.id, 'terminated');
    expect(await activeAllocations(created.id)).toHaveLength(0);
    expect(simulator().terminations.map((t) => t.modelUid)).toContain(uid);
    expect(simulator().gpus().flatMap((gpu) => gpu.holders).filter((holder) => holder.startsWith(uid))).toEqual([]);
    expect((simulator().state().models as Array<{ model_uid: string }>).map((m) => m.model_uid)).not.toContain(uid);
    expect(simulator().requests['POST /v1/models/{model_uid}/cancel'] ?? 0).toBe(cancels);
  });

  it('keeps running a deployment whose model the engine recovers after a crash, without deleting it', async () => {
    const running = await until((await deploy({ model_name: 'Yi-1.5-chat' })).id, 'running');
    const uid = running.engine_model_uid as string;
    const launches = simulator().launches.filter((l) => l.modelUid === uid).length;
    // Recovery takes 1.5 s: long enough for the reconciler (every 0.5 s) to see it, within the 3 s grace.
    simulator().setModelLoadMs(1500);
    expect(simulator().crash(uid)).toBe(true);
    simulator().setModelLoadMs(300);
    await waitUntil(async () => Boolean((await app.db('deployments').where({ id: running.id }).first()).engine_unhealthy_since), 'the reconciler to see the model not ready');
    await waitUntil(async () => (await app.db('deployments').where({ id: running.id }).first()).engine_unhealthy_since === null, 'the reconciler to see it recovered');
    expect((await read(running.id)).status).toBe('running');
    expect(simulator().terminations.map((t) => t.modelUid)).not.toContain(uid);
    expect(simulator().launches.filter((l) => l.modelUid === uid)).toHaveLength(launches);
    expect(simulator().running()).toContain(uid);
  });

  it('fails at health_check a running model that does not come back within the grace period, releasing its GPUs once the engine lets it go', async () => {
    const running = await until((await deploy({ model_name: 'phi-3-mini-128k-instruct' })).id, 'running');
    // A reload longer than the 3 s grace; the DELETE that follows waits it out (the worker's launch guard).
    simulator().setModelLoadMs(5000);
    expect(simulator().crash(running.engine_model_uid as string)).toBe(true);
    simulator().setModelLoadMs(300);
    const failed = await until(running.id, 'failed');
    expect(failed).toMatchObject({ failure_stage: 'health_check', failure_reason: expect.stringMatching(/did not recover on its engine within \d+ seconds/) });
    await waitUntil(async () => (await activeAllocations(running.id)).length === 0, 'the GPUs to be released');
  });

  it('fails at once a running model the engine no longer knows', async () => {
    const running = await until((await deploy({ model_name: 'mistral-nemo-instruct' })).id, 'running');
    const signedIn = await fetch(`${simulator().url}/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: simulator().credentials?.adminUser, password: simulator().credentials?.adminPassword }),
    });
    const { access_token: token } = (await signedIn.json()) as { access_token: string };
    expect((await fetch(`${simulator().url}/v1/models/${running.engine_model_uid}`, { method: 'DELETE', headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
    const failed = await until(running.id, 'failed');
    expect(failed).toMatchObject({ failure_stage: 'health_check', failure_reason: 'The engine no longer serves the model.' });
    expect(await activeAllocations(running.id)).toHaveLength(0);
  });
});

describe('the replicas of a deployment (one: replica 0)', () => {
  it('serves through replica 0: starting on its GPUs while it loads, ready as the deployment runs, stopping on delete, stopped with its GPUs released once terminated', async () => {
    simulator().setModelLoadMs(6000);
    const created = await deploy({ model_name: 'qwen2.5-instruct', model_size_in_billions: 3 });
    const starting = await until(created.id, 'starting');
    simulator().setModelLoadMs(300);
    const [loading] = await replicasOf(created.id);
    expect(await replicasOf(created.id)).toHaveLength(1);
    expect(loading).toMatchObject({
      ordinal: 0,
      status: 'starting',
      engine_model_uid: starting.engine_model_uid,
      gpu_allocation_id: starting.gpu_allocation_id,
      organization_id: Number(starting.organization_id),
      ready_at: null,
      running_since: null,
    });
    expect(await allocationOf(loading.gpu_allocation_id)).toMatchObject({ status: 'active' });

    await until(created.id, 'running');
    const [ready] = await replicasOf(created.id);
    expect(ready).toMatchObject({ status: 'ready', running_until: null, stopped_at: null, gpu_service_key: expect.stringMatching(/^local:simulator:gpu_instance:/) });
    expect(ready.ready_at).toBeInstanceOf(Date);
    expect(ready.running_since.getTime() % 1000).toBe(0);

    await app.container.boss.offWork(TERMINATE_QUEUE);
    expect((await remove(created.id)).response.status).toBe(200);
    const [stopping] = await replicasOf(created.id);
    expect(stopping).toMatchObject({ status: 'stopping', stopped_at: null });
    expect(stopping.running_until.getTime()).toBeGreaterThanOrEqual(ready.running_since.getTime());
    expect(await allocationOf(ready.gpu_allocation_id)).toMatchObject({ status: 'active' });

    const terminate = jobDefinitions(app.container).find((job) => job.queue === TERMINATE_QUEUE);
    if (!terminate) throw new Error('no terminate job');
    await workOn(app.container.boss, terminate, app.container.log);
    await until(created.id, 'terminated');
    const [stopped] = await replicasOf(created.id);
    expect(stopped).toMatchObject({ status: 'stopped', running_until: stopping.running_until });
    expect(stopped.stopped_at).toBeInstanceOf(Date);
    expect(await allocationOf(ready.gpu_allocation_id)).toMatchObject({ status: 'released', released_at: expect.any(Date) });
    expect(simulator().running()).not.toContain(ready.engine_model_uid);
  });

  it('stops the replica of a deployment whose model failed to load, its GPUs released and no second of it metered', async () => {
    simulator().failNextLaunch('error');
    const failed = await until((await deploy({ model_name: 'glm4-chat' })).id, 'failed');
    const [replica] = await replicasOf(failed.id);
    expect(replica).toMatchObject({ status: 'stopped', engine_model_uid: failed.engine_model_uid, ready_at: null, running_since: null, running_until: null });
    expect(replica.stopped_at).toBeInstanceOf(Date);
    expect(await allocationOf(replica.gpu_allocation_id)).toMatchObject({ status: 'released' });
  });
});

describe('GPU seconds of a deployment, metered by the workers', () => {
  const intervalsOf = (id: string) => app.db('gpu_usage_intervals').where({ deployment_id: id }).orderBy('started_at');
  const secondsOf = async (id: string) => (await intervalsOf(id)).reduce((sum, interval) => sum + Number(interval.quantity), 0);
  /** Queues the meter's tick, as its schedule does every minute, for the app's workers to run; then the seconds closed. */
  const tickedSecondsOf = async (id: string) => {
    await app.container.boss.send(METER_GPU_SECONDS_QUEUE, {});
    return secondsOf(id);
  };

  it('closes its seconds while it runs, and the last ones at the second it was deleted', async () => {
    const { id } = await deploy({ model_name: 'qwen2.5-instruct', model_size_in_billions: 0.5 });
    await until(id, 'running');
    await waitUntil(async () => (await tickedSecondsOf(id)) > 0, 'the meter job to close a second of running');

    expect((await remove(id)).response.status).toBe(200);
    await until(id, 'terminated');
    const { running_since: since, running_until: stopped } = await app.db('deployment_replicas').where({ deployment_id: id }).first();
    const ran = (stopped.getTime() - since.getTime()) / 1000;
    await waitUntil(async () => (await tickedSecondsOf(id)) === ran, () => `the meter job to close the ${ran} seconds it ran`);
    const intervals = await intervalsOf(id);
    expect(intervals[0]?.started_at).toEqual(since);
    intervals.slice(1).forEach((interval, i) => expect(interval.started_at).toEqual(intervals[i]?.ended_at));
    expect(intervals.at(-1)?.ended_at).toEqual(stopped);
  });
});

describe('a deployment failed while its model loads', () => {
  let slow: TestApp;
  beforeAll(async () => {
    slow = await startTestApp({ ...FAST_PROVISIONING, DEPLOYMENT_START_TIMEOUT_SECONDS: '1' }, { workers: true, cluster: { modelLoadMs: 4000 } });
  });
  afterAll(() => slow.close());

  it('keeps its GPUs until the engine confirms the model gone, then releases them', async () => {
    const slowOwner = await registeredUser(slow);
    const { data: created } = await slowOwner.api.POST('/api/v1/model-deployments', { body: { model_name: 'qwen2.5-instruct', model_size_in_billions: 0.5 } });
    const id = created?.id ?? '';
    const failed = await untilStatus(slowOwner, id, 'failed');
    expect(failed).toMatchObject({ failure_stage: 'health_check' });
    const uid = failed.engine_model_uid as string;
    const held = await slow.db('gpu_allocations').where({ deployment_id: id, status: 'active' });
    // Read while the engine still loads the model: the failed deployment keeps its GPUs.
    expect(engineModelOf(uid, slow.simulator)?.replicas[0]?.routed).toBe(false);
    expect(held).toHaveLength(1);
    await waitUntil(async () => (await slow.db('gpu_allocations').where({ deployment_id: id, status: 'active' })).length === 0, 'the cleanup to release the GPUs', 20_000);
    expect(slow.simulator?.gpus().flatMap((gpu) => gpu.holders).filter((holder) => holder.startsWith(uid))).toEqual([]);
    expect(slow.simulator?.terminations.map((t) => t.modelUid)).toContain(uid);
  });

  it('keeps its replica failed while the GPUs are held, and stopped once the cleanup released them', async () => {
    const slowOwner = await registeredUser(slow);
    const { data: created } = await slowOwner.api.POST('/api/v1/model-deployments', { body: { model_name: 'qwen2.5-instruct', model_size_in_billions: 0.5 } });
    const id = created?.id ?? '';
    await untilStatus(slowOwner, id, 'failed');
    const [held] = await replicasOf(id, slow);
    const heldAllocation = await allocationOf(held.gpu_allocation_id, slow);
    // Read while the engine still loads the model: the replica failed, its GPUs held.
    expect(engineModelOf(held.engine_model_uid, slow.simulator)?.replicas[0]?.routed).toBe(false);
    expect(held).toMatchObject({ status: 'failed', stopped_at: null, running_since: null });
    expect(heldAllocation).toMatchObject({ status: 'active' });
    await waitUntil(async () => (await replicasOf(id, slow))[0]?.status === 'stopped', 'the cleanup to stop the replica', 20_000);
    expect(await allocationOf(held.gpu_allocation_id, slow)).toMatchObject({ status: 'released' });
  });
});
