import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { engineModelUid } from '../../src/deployments/provisioning.ts';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import type { Deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { typedClient, type Api } from '../helpers/browser.ts';
import { seenWithin, waitUntil } from '../helpers/net.ts';
import { startServiceProcess, type ServiceProcess } from '../helpers/service-process.ts';

/**
 * The scale-out path: two ROLE=api and two ROLE=worker processes (`node src/main.ts`)
 * on one Postgres, everything on 127.0.0.1. The in-process app only provides the database, the SMTP
 * listener and the registered GPU cluster simulator; no request goes to it and it runs no job.
 */
let app: TestApp;
let owner: SignedInUser;
const apis: ServiceProcess[] = [];
const workers: ServiceProcess[] = [];
const DRAIN_SECONDS = 1;

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50', SHUTDOWN_DRAIN_SECONDS: String(DRAIN_SECONDS) }, { cluster: { modelLoadMs: 200, tokenLatencyMs: 1 } });
  const started = await Promise.all([
    startServiceProcess(app, { ROLE: 'api' }),
    startServiceProcess(app, { ROLE: 'api' }),
    startServiceProcess(app, { ROLE: 'worker' }),
    startServiceProcess(app, { ROLE: 'worker' }),
  ]);
  apis.push(...started.slice(0, 2));
  workers.push(...started.slice(2));
  owner = await registeredUser(app);
}, 60_000);
afterAll(async () => {
  for (const process of [...apis, ...workers]) process.kill();
  await app?.close();
});

/** The owner's session (its cookies) on one API process. */
const on = (api: ServiceProcess): Api => typedClient(api.url as string, (request) => owner.browser.fetch(request));
const apiAt = (index: number): ServiceProcess => apis[index % apis.length] as ServiceProcess;

async function statusOf(id: string): Promise<Deployment['status'] | undefined> {
  return (await on(apiAt(1)).GET('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: id } } })).data?.status;
}

const untilRunning = (id: string, timeoutMs = 30_000) => waitUntil(async () => (await statusOf(id)) === 'running', `deployment ${id} to run`, timeoutMs);

/** The statuses a deployment went through, from its event log, with how many times it entered each. */
async function statusHistory(id: string): Promise<Record<string, number>> {
  const rows: Array<{ to_status: string; times: string }> = await app.db('deployment_events').where({ deployment_id: id, type: 'deployment.status_changed' }).groupBy('to_status').select('to_status', app.db.raw('count(*) as times'));
  return Object.fromEntries(rows.map((row) => [row.to_status, Number(row.times)]));
}

/** How many GPU allocations were ever made for the deployment. */
async function allocationsOf(id: string): Promise<number> {
  const row = await app.db('gpu_allocations').where({ deployment_id: id }).count({ n: '*' }).first();
  return Number(row?.n);
}

async function chat(base: string, key: string): Promise<number> {
  const response = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'qwen2.5-instruct', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
  });
  await response.arrayBuffer();
  return response.status;
}

describe('two API and two worker processes on one Postgres', () => {
  it('provisions deployments created through either API exactly once', async () => {
    const created = await Promise.all([0, 1, 2, 3].map((i) => on(apiAt(i)).POST('/api/v1/model-deployments', { body: { model_name: 'qwen2.5-instruct' } })));
    const ids = created.map(({ data }) => data?.id as string);
    expect(ids.every(Boolean)).toBe(true);
    await Promise.all(ids.map((id) => untilRunning(id)));
    for (const id of ids) {
      expect(await statusHistory(id)).toEqual({ requested: 1, provisioning: 1, starting: 1, running: 1 });
      expect(await allocationsOf(id)).toBe(1);
    }
    // One launch on the engine each, whichever worker took it.
    const launched = app.simulator?.launches.map((launch) => launch.modelUid) ?? [];
    for (const id of ids) expect(launched.filter((uid) => uid === engineModelUid(id))).toHaveLength(1);
  });

  it('refuses a key revoked through one API on the other within 1 s', async () => {
    const { data } = await on(apiAt(0)).GET('/api/v1/model-deployments');
    const running = data?.items.find((item) => item.status === 'running');
    const key = await apiKey({ api: on(apiAt(0)) }, [running?.id as string]);
    expect(await chat(apiAt(1).url as string, key.key)).toBe(200);
    await on(apiAt(0)).DELETE('/v1/organization/api-keys/{api_key_id}', { params: { path: { api_key_id: key.id } } });
    await seenWithin(async () => (await chat(apiAt(1).url as string, key.key)) === 401, performance.now(), 1_000, 'the other API to refuse the revoked key');
  });

  it('finishes, on workers started after it, a deployment whose only worker was killed (SIGKILL) while provisioning it', async () => {
    // One worker left to take the job, then killed while the engine loads the model.
    const [first, second] = workers as [ServiceProcess, ServiceProcess];
    second.kill('SIGTERM');
    expect(await second.exited).toBe(0);
    app.simulator?.setModelLoadMs(4_000);
    const { data } = await on(apiAt(0)).POST('/api/v1/model-deployments', { body: { model_name: 'qwen2.5-instruct' } });
    const id = data?.id as string;
    await waitUntil(async () => (await statusOf(id)) === 'starting', 'the deployment to be loading on the engine');
    first.kill('SIGKILL');
    await first.exited;
    app.simulator?.setModelLoadMs(200);
    workers.splice(0, 2, await startServiceProcess(app, { ROLE: 'worker' }), await startServiceProcess(app, { ROLE: 'worker' }));
    await untilRunning(id);
    expect(await statusHistory(id)).toEqual({ requested: 1, provisioning: 1, starting: 1, running: 1 });
    expect(await allocationsOf(id)).toBe(1);
  });

  it('loses no request while each API is restarted in turn under a steady loop', async () => {
    const { data } = await on(apiAt(0)).GET('/api/v1/model-deployments');
    const running = data?.items.find((item) => item.status === 'running');
    const { key } = await apiKey({ api: on(apiAt(0)) }, [running?.id as string]);

    // A load balancer as Kubernetes runs one: a backend is in rotation while its /readyz answers 200.
    const inRotation = new Set(apis.map((api) => api.url as string));
    let balancing = true;
    const balancer = (async () => {
      while (balancing) {
        for (const api of [...apis]) {
          const url = api.url as string;
          const ready = await fetch(`${url}/readyz`).then((response) => response.status === 200, () => false);
          if (ready) inRotation.add(url);
          else inRotation.delete(url);
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    })();
    let next = 0;
    const pick = () => {
      const backends = [...inRotation];
      return backends[next++ % backends.length] as string;
    };

    // Four clients in a loop: a chat completion (not idempotent: never retried) and a list (idempotent:
    // retried once on another backend if the connection fails), counted until the restarts are over.
    const outcomes = { chats: 0, lists: 0, failed: [] as string[] };
    let looping = true;
    const client = async () => {
      while (looping) {
        const status = await chat(pick(), key).catch((error: unknown) => `chat: ${String(error)}`);
        if (status === 200) outcomes.chats++;
        else outcomes.failed.push(String(status));
        const list = async () => (await typedClient(pick(), (request) => owner.browser.fetch(request)).GET('/api/v1/model-deployments')).response.status;
        const listed = await list().catch(() => list()).catch((error: unknown) => `list: ${String(error)}`);
        if (listed === 200) outcomes.lists++;
        else outcomes.failed.push(String(listed));
      }
    };
    const clients = Array.from({ length: 4 }, client);

    for (const index of [0, 1]) {
      const old = apis[index] as ServiceProcess;
      old.kill('SIGTERM');
      expect(await old.exited).toBe(0);
      const replacement = await startServiceProcess(app, { ROLE: 'api' });
      apis[index] = replacement;
      await waitUntil(async () => inRotation.has(replacement.url as string), 'the new API to be taken into rotation');
      inRotation.delete(old.url as string);
    }
    looping = false;
    await Promise.all(clients);
    balancing = false;
    await balancer;

    expect(outcomes.failed).toEqual([]);
    expect(outcomes.chats).toBeGreaterThan(20);
    expect(outcomes.lists).toBeGreaterThan(20);
  });
});
