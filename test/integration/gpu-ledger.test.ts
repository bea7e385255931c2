import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { untilStatus } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { operatorCli } from '../helpers/operator-cli.ts';

/**
 * One GPU ledger per physical cluster: the test app's simulator (4 x A10G, 4 x L40S,
 * 8 x H100) is registered twice, as the dedicated cluster `local-simulator` and as the hosted
 * cluster `local-hosted`, as an operator may register one real cluster for both uses. Hosted
 * launches and dedicated deployments book from the same record of GPUs.
 */
type DeploymentPlan = components['schemas']['DeploymentPlan'];

let app: TestApp;
let user: SignedInUser;
const QWEN_7B = { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 };

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' }, { workers: true, cluster: { modelLoadMs: 100, tokenLatencyMs: 2 } });
  user = await registeredUser(app);
});
afterAll(() => app?.close());

async function plan(body: typeof QWEN_7B): Promise<DeploymentPlan> {
  const { data, response } = await user.api.POST('/api/v1/model-deployments/plan', { body });
  expect(response.status).toBe(200);
  return data as DeploymentPlan;
}

/** GPUs booked on each physical worker (endpoint and engine worker), against the worker's GPUs. */
async function bookedPerWorker(): Promise<Array<{ worker: string; booked: number; gpus: number }>> {
  const { rows } = await app.db.raw<{ rows: Array<{ worker: string; booked: string; gpus: number }> }>(
    `select c.endpoint || ' ' || i.engine_worker as worker, sum(a.gpu_count) as booked, max(t.gpu_count) as gpus
     from gpu_allocations a join instances i on i.id = a.instance_id join clusters c on c.id = i.cluster_id
     join instance_types t on t.id = i.instance_type_id
     where a.status = 'active' group by c.endpoint, i.engine_worker`,
  );
  return rows.map((row) => ({ ...row, booked: Number(row.booked) }));
}

describe('hosted models and dedicated deployments share the GPUs of one cluster', () => {
  it('books the hosted models on the ledger: the plan counts their GPUs taken and the quick-start model is placed elsewhere, and runs', async () => {
    const before = await plan(QWEN_7B);
    expect(before.placement.selected_instance_type).toBe('g5.12xlarge');
    expect(before.capacity.find((c) => c.instance_type === 'g5.12xlarge')?.free_gpus).toBe(4);

    // The four hosted models (one A10G each, the cheapest worker with room) through the real CLI.
    const launched = await operatorCli(app, 'hosted', 'launch');
    expect(launched, launched.stderr).toMatchObject({ code: 0 });
    expect(launched.stdout.trim().split('\n')).toHaveLength(4);
    expect(launched.stdout).not.toContain('failed');
    const hosted = await app.db('gpu_allocations as a').join('hosted_model_endpoints as e', 'e.id', 'a.hosted_model_endpoint_id').where('a.status', 'active').select('e.model_name', 'a.gpu_count', 'e.instance_id', 'a.instance_id as booked_on');
    expect(hosted).toHaveLength(4);
    for (const row of hosted) expect(row.booked_on).toBe(row.instance_id);

    // The dedicated registration sees the A10Gs taken: the plan tells the truth...
    const after = await plan(QWEN_7B);
    const a10g = after.capacity.find((c) => c.instance_type === 'g5.12xlarge');
    expect(a10g).toMatchObject({ gpus: 4, free_gpus: 0, max_free_gpus_per_instance: 0 });
    expect(after.placement.selected_instance_type).toBe('g6e.12xlarge');
    expect(after.would_be_refused).toBeNull();

    // ...and provisioning places the deployment where the plan said, where it loads and runs.
    const { data: created } = await user.api.POST('/api/v1/model-deployments', { body: QWEN_7B });
    const running = await untilStatus(user, created?.id as string, 'running');
    expect(running.selected_instance_type).toBe('g6e.12xlarge');
  });

  it('never books a GPU twice when hosted launches and dedicated creates race', async () => {
    // Launching again keeps each hosted model where it is; creates run at the same time.
    const creates = Array.from({ length: 6 }, () => user.api.POST('/api/v1/model-deployments', { body: { model_name: 'llama-3.1-instruct', model_size_in_billions: 8 } }));
    const [relaunched, ...answers] = await Promise.all([operatorCli(app, 'hosted', 'launch'), ...creates]);
    expect(relaunched.code, relaunched.stderr).toBe(0);
    const ids = answers.map((answer) => answer.data?.id as string);
    await Promise.all(ids.map((id) => untilStatus(user, id, 'running')));
    for (const worker of await bookedPerWorker()) expect(worker.booked, worker.worker).toBeLessThanOrEqual(worker.gpus);
    expect(await app.db('gpu_allocations').whereNotNull('hosted_model_endpoint_id').where({ status: 'active' }).count('* as n').first()).toEqual({ n: '4' });
  });

});
