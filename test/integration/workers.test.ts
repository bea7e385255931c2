import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment, untilStatus } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { waitUntil } from '../helpers/net.ts';
import { startServiceProcess, type ServiceProcess } from '../helpers/service-process.ts';

/**
 * Provisioning by separate worker processes (ROLE=worker) against one database, as in production:
 * the API process here only accepts requests.
 */
let app: TestApp;
let owner: SignedInUser;
const workers: ServiceProcess[] = [];

beforeAll(async () => {
  // No workers in this process (ROLE=api, the default of startTestApp): only the worker processes provision.
  app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' }, { cluster: { modelLoadMs: 200 } });
  owner = await registeredUser(app);
});
afterAll(async () => {
  for (const worker of workers) worker.kill('SIGKILL');
  await app.close();
});

async function startWorker(env: Record<string, string> = {}): Promise<ServiceProcess> {
  const worker = await startServiceProcess(app, { ROLE: 'worker', ...env });
  workers.push(worker);
  return worker;
}

/** The deployments among `ids` whose model the worker launched, from its `model launched` log lines. */
function launchedBy(worker: ServiceProcess, ids: string[]): string[] {
  const lines = worker.output().split('\n').filter((line) => line.includes('"msg":"model launched"'));
  return ids.filter((id) => lines.some((line) => line.includes(`"deployment_id":"${id}"`)));
}

/** How many sessions of the test database wait to lock a deployment's row. */
async function waitingForDeploymentRows(): Promise<number> {
  const { rows } = await app.db.raw<{ rows: Array<{ n: number }> }>(
    "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query ilike '%deployments%for update%'",
  );
  return rows[0]?.n ?? 0;
}

/** Created through the API, `requested` until a worker process takes it. */
const deploy = (model_name: string, model_size_in_billions?: number) => deployment(app, owner, 'requested', { model_name, model_size_in_billions });

const launchesOf = (uid: string) => app.simulator?.launches.filter((launch) => launch.modelUid === uid) ?? [];

describe('worker processes', () => {
  it('a worker killed mid-provisioning is replaced by another that finishes the deployment once', async () => {
    const first = await startWorker();
    app.simulator?.setModelLoadMs(4_000);
    const { id } = await deploy('qwen2.5-instruct', 1.5);
    await untilStatus(owner, id, 'starting');
    first.kill('SIGKILL');
    await first.exited;
    app.simulator?.setModelLoadMs(200);

    const second = await startWorker();
    const { engine_model_uid } = await untilStatus(owner, id, 'running').catch((error: Error) => {
      throw new Error(`${error.message}\n${second.output()}`);
    });
    expect(launchesOf(engine_model_uid ?? '')).toHaveLength(1);
    expect(await app.db('gpu_allocations').where({ deployment_id: id })).toHaveLength(1);
    second.kill('SIGTERM');
    expect(await second.exited).toBe(0);
  });

  it('two workers at once: while one is held inside a job, the other takes the rest; none is provisioned twice', async () => {
    // The first deployment is queued before the workers start, its row locked by the test: the
    // worker that takes its job waits inside it (placement locks the row first), and its fetcher
    // takes nothing more until that job ends. The reconciler must not queue the held one again
    // meanwhile (it would hold the other worker too): its stuck-after is long here.
    const held = await deploy('qwen2.5-instruct');
    const lock = await app.db.transaction();
    await lock('deployments').where({ id: held.id }).forUpdate().first();
    const pair = await Promise.all([startWorker({ DEPLOYMENT_STUCK_AFTER_SECONDS: '600' }), startWorker({ DEPLOYMENT_STUCK_AFTER_SECONDS: '600' })]);
    await waitUntil(async () => (await waitingForDeploymentRows()) === 1, 'a worker to wait inside the held deployment\'s job');

    const models = ['mistral-instruct-v0.3', 'gemma-3-it', 'phi-3-mini-128k-instruct', 'glm4-chat', 'Yi-1.5-chat'];
    const created = await Promise.all(models.map((model_name) => deploy(model_name)));
    const running = [];
    for (const { id } of created) running.push(await untilStatus(owner, id, 'running'));
    await lock.rollback();
    running.push(await untilStatus(owner, held.id, 'running'));

    // Both took jobs: the held one's worker launched only it, the other worker everything else.
    const ids = [held.id, ...created.map((d) => d.id)];
    const [first, second] = pair.map((worker) => launchedBy(worker, ids)) as [string[], string[]];
    const [holder, other] = first.includes(held.id) ? [first, second] : [second, first];
    expect(holder).toEqual([held.id]);
    expect(other.toSorted()).toEqual(created.map((d) => d.id).toSorted());
    for (const { id, engine_model_uid } of running) {
      expect(launchesOf(engine_model_uid ?? ''), engine_model_uid ?? '').toHaveLength(1);
      expect(await app.db('gpu_allocations').where({ deployment_id: id })).toHaveLength(1);
    }
    const overbooked = await app.db('gpu_allocations as a')
      .join('instances as i', 'i.id', 'a.instance_id')
      .join('instance_types as t', 't.id', 'i.instance_type_id')
      .where('a.status', 'active')
      .groupBy('i.id', 't.gpu_count')
      .havingRaw('sum(a.gpu_count) > t.gpu_count')
      .select('i.id');
    expect(overbooked).toEqual([]);
  });
});
