import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment, untilStatus } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { waitUntil } from '../helpers/net.ts';

/**
 * Provisioning by separate worker processes (ROLE=worker) against one database, as in production:
 * the API process here only accepts requests.
 */
interface WorkerProcess {
  child: ChildProcess;
  output: () => string;
}

let app: TestApp;
let owner: SignedInUser;
const workers: WorkerProcess[] = [];

beforeAll(async () => {
  // No workers in this process (ROLE=api, the default of startTestApp): only the worker processes provision.
  app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' }, { cluster: { modelLoadMs: 200 } });
  owner = await registeredUser(app);
});
afterAll(async () => {
  for (const worker of workers) worker.child.kill('SIGKILL');
  await app.close();
});

async function startWorker(): Promise<WorkerProcess> {
  const child = spawn(process.execPath, ['src/main.ts'], {
    env: { ...process.env, ...app.env, ROLE: 'worker', DATABASE_URL: app.databaseUrl, SMTP_URL: app.inbox.url, LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const worker = { child, output: () => output };
  workers.push(worker);
  await waitUntil(async () => output.includes('"msg":"started"'), () => `the worker to start\n${output}`);
  return worker;
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
    first.child.kill('SIGKILL');
    await once(first.child, 'exit');
    app.simulator?.setModelLoadMs(200);

    const second = await startWorker();
    const { engine_model_uid } = await untilStatus(owner, id, 'running').catch((error: Error) => {
      throw new Error(`${error.message}\n${second.output()}`);
    });
    expect(launchesOf(engine_model_uid ?? '')).toHaveLength(1);
    expect(await app.db('gpu_allocations').where({ deployment_id: id })).toHaveLength(1);
    second.child.kill('SIGTERM');
    const [code] = await once(second.child, 'exit');
    expect(code).toBe(0);
  });

  it('two workers never provision the same deployment twice', async () => {
    await Promise.all([startWorker(), startWorker()]);
    const models = ['qwen2.5-instruct', 'mistral-instruct-v0.3', 'gemma-3-it', 'phi-3-mini-128k-instruct', 'glm4-chat', 'Yi-1.5-chat'];
    const created = await Promise.all(models.map((model_name) => deploy(model_name)));
    const running = [];
    for (const { id } of created) running.push(await untilStatus(owner, id, 'running'));

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
