import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobDefinitions } from '../../src/container.ts';
import { TERMINATE_QUEUE } from '../../src/deployments/provisioning.ts';
import { workOn } from '../../src/jobs/queue.ts';
import { registeredUser } from '../factories/accounts.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import type { Browser } from '../helpers/browser.ts';
import { jsonOf, type Deployment, type Problem } from '../helpers/http.ts';
import { waitUntil } from '../helpers/net.ts';


let app: TestApp;
let browser: Browser;
beforeAll(async () => {
  app = await startTestApp(FAST_PROVISIONING, { cluster: { modelLoadMs: 300 } });
  browser = (await registeredUser(app)).browser;
  await app.db('billing_accounts').update({ max_active_resources: 50 });
});
afterAll(() => app.close());

const simulator = () => {
  if (!app.simulator) throw new Error('no simulator');
  return app.simulator;
};

async function deploy(body: Record<string, unknown>): Promise<Deployment> {
  const response = await browser.post('/api/v1/model-deployments', body);
  expect(response.status, await response.clone().text()).toBe(201);
  return jsonOf<Deployment>(response);
}

async function read(id: string): Promise<Deployment> {
  return jsonOf<Deployment>(await browser.get(`/api/v1/model-deployments/${id}`));
}

async function until(id: string, status: string): Promise<Deployment> {
  let last: Deployment | undefined;
  await waitUntil(
    async () => (last = await read(id)).status === status,
    () => `deployment ${id} to be ${status} (is ${last?.status} ${last?.failure_reason ?? ''})`,
    20_000,
  );
  return last as Deployment;
}

const activeAllocations = (deploymentId: string) => app.db('gpu_allocations').where({ deployment_id: deploymentId, status: 'active' });

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
    const deleted = await browser.delete(`/api/v1/model-deployments/${running.id}`);
    expect(deleted.status).toBe(200);
    expect(await jsonOf(deleted)).toMatchObject({ status: 'terminating' });
    const again = await browser.delete(`/api/v1/model-deployments/${running.id}`);
    expect(again.status).toBe(409);
    expect((await jsonOf<Problem>(again)).code).toBe('DEPLOYMENT_DELETION_PENDING');

    const terminate = jobDefinitions(app.container).find((job) => job.queue === TERMINATE_QUEUE);
    if (!terminate) throw new Error('no terminate job');
    await workOn(app.container.boss, terminate, app.container.log);
    const terminated = await until(running.id, 'terminated');
    expect(terminated.terminated_at).not.toBeNull();
    expect(await activeAllocations(running.id)).toHaveLength(0);
    expect(simulator().running()).not.toContain(running.engine_model_uid);
    expect(simulator().gpus().filter((gpu) => gpu.heldBy?.startsWith(running.engine_model_uid ?? '-'))).toEqual([]);

    const once = await browser.delete(`/api/v1/model-deployments/${running.id}`);
    expect(once.status).toBe(200);
    expect(await jsonOf(once)).toMatchObject({ status: 'terminated', terminated_at: terminated.terminated_at });
  });

  it('fails at the capacity stage when no instance with enough memory has free GPUs', async () => {
    // 72B in fp16 needs 174.8 GB: 4 of the 4 L40S (48 GB), or 4 of the 8 H100 (80 GB). Room for three.
    const placed: Deployment[] = [];
    for (let i = 0; i < 3; i++) placed.push(await until((await deploy({ model_name: 'qwen2.5-instruct', model_size_in_billions: 72 })).id, 'running'));
    expect(placed.map((d) => d.selected_instance_type).sort()).toEqual(['g6e.12xlarge', 'p5.48xlarge', 'p5.48xlarge']);
    const fourth = await until((await deploy({ model_name: 'qwen2.5-instruct', model_size_in_billions: 72 })).id, 'failed');
    expect(fourth).toMatchObject({ failure_stage: 'capacity', gpu_allocation_id: null, engine_model_uid: null });
    expect(fourth.failure_reason).toMatch(/174.8 GB/);
    for (const { id } of placed) await browser.delete(`/api/v1/model-deployments/${id}`);
    for (const { id } of placed) await until(id, 'terminated');
  });

  it('fails at instance selection when no instance type can hold the model', async () => {
    await app.db('model_specs').insert({
      deployable_model_id: app.db('deployable_models').where({ model_name: 'llama-3.1-instruct' }).select('id'),
      model_format: 'pytorch',
      model_size_in_billions: 405,
      quantizations: ['none'],
      model_engine: 'vLLM',
    });
    const failed = await until((await deploy({ model_name: 'llama-3.1-instruct', model_size_in_billions: 405 })).id, 'failed');
    expect(failed.failure_stage).toBe('instance_selection');
  });

  it.each([
    ['error', /Engine core initialization failed/],
    ['oom', /CUDA out of memory/],
  ] as const)('fails at the model_launch stage when the engine fails to load (%s), releasing the GPUs', async (kind, reason) => {
    simulator().failNextLaunch(kind);
    const failed = await until((await deploy({ model_name: 'gemma-2-it', model_size_in_billions: 9 })).id, 'failed');
    expect(failed.failure_stage).toBe('model_launch');
    expect(failed.failure_reason).toMatch(reason);
    expect(await activeAllocations(failed.id)).toHaveLength(0);
  });

  it('notices an engine that lost a running model: failed at health_check', async () => {
    const running = await until((await deploy({ model_name: 'phi-3-mini-128k-instruct' })).id, 'running');
    expect(simulator().crash(running.engine_model_uid as string)).toBe(true);
    const failed = await until(running.id, 'failed');
    expect(failed.failure_stage).toBe('health_check');
    expect(await activeAllocations(running.id)).toHaveLength(0);
  });
});
