import { randomUUID } from 'node:crypto';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddedPostgres, type RunningPostgres } from '../../src/db/embedded-postgres.ts';
import { createLogger } from '../../src/logger.ts';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment, untilStatus } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { freePort, waitUntil } from '../helpers/net.ts';

/**
 * Postgres restarted under a steady loop of requests: `/healthz` answers 503 while it is
 * down, the service recovers by itself (knex's pool and pg-boss reconnect), and no usage record or
 * job is lost or doubled. The service runs on a Postgres cluster of this test's own, stopped and
 * started again on the same data directory and port.
 */
const log = createLogger('silent');
let dataDir: string;
let port: number;
let postgres: RunningPostgres;
let app: TestApp;
let owner: SignedInUser;

const startPostgres = async () => {
  postgres = await startEmbeddedPostgres({ dataDir, port, database: 'restarted', persistent: true, log });
};

beforeAll(async () => {
  const parent = await mkdtemp(path.join(os.tmpdir(), 'pg-restart-'));
  // Run as root, the cluster runs as the `postgres` user, who must reach its directory.
  await chmod(parent, 0o755);
  dataDir = path.join(parent, 'data');
  port = await freePort();
  await startPostgres();
  app = await startTestApp(
    { ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' },
    { workers: true, cluster: { modelLoadMs: 20 }, database: { url: postgres.url, drop: async () => undefined } },
  );
  owner = await registeredUser(app);
}, 120_000);
afterAll(async () => {
  await app?.close();
  await postgres?.stop();
  await rm(path.dirname(dataDir), { recursive: true, force: true });
});

const health = async () => (await fetch(`${app.url}/healthz`)).status;
const readiness = async () => {
  const response = await fetch(`${app.url}/readyz`);
  return { status: response.status, detail: ((await response.json()) as { detail?: string }).detail };
};

describe('Postgres restarted under load', () => {
  it('answers 503 on /healthz while it is down, recovers by itself, and loses or doubles no usage and no job', async () => {
    const running = await deployment(app, owner, 'running');
    const key = await apiKey(owner, [running.id]);
    const organizationId = (await owner.api.GET('/v1/organization')).data?.id ?? 0;
    const completed: string[] = [];
    /** Answers received in full while Postgres was down. */
    const completedWhileDown: string[] = [];
    let postgresDown = false;
    const failures = new Map<number, number>();
    let sent = 0;
    /** One chat completion with the key, counted as completed when the client got the answer in full. */
    const call = async () => {
      const id = `restart-${sent++}`;
      const response = await fetch(`${app.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json', 'x-request-id': id },
        body: JSON.stringify({ model: running.id, messages: [{ role: 'user', content: id }] }),
      }).catch(() => undefined);
      // A connection that fails (no answer at all) counts as a failure of its own (status 0), never ignored.
      const text = await response?.text().catch(() => undefined);
      const status = text === undefined ? 0 : (response?.status ?? 0);
      if (status === 200 && text?.includes('"choices"')) (postgresDown ? completedWhileDown : completed).push(id);
      else failures.set(status, (failures.get(status) ?? 0) + 1);
    };
    /** The steady loop of requests, until `until` says so. */
    const loop = async (until: () => boolean) => {
      while (!until()) await call();
    };

    await loop(() => completed.length >= 5);
    // A job queued just before Postgres goes: its provisioning is under way, or waiting, through the outage.
    const before = await deployment(app, owner, 'requested', { model_name: 'mistral-instruct-v0.3' });
    // An answer right before it goes: its usage may still be in the recorder's batch (written every second).
    await call();
    await postgres.stop();
    postgresDown = true;
    let up = false;
    const duringOutage = loop(() => up);
    await waitUntil(async () => (await health()) === 503, '/healthz to answer 503 while Postgres is down');
    // Not ready either: a load balancer sends its traffic elsewhere meanwhile.
    expect(await readiness()).toEqual({ status: 503, detail: 'The database does not answer.' });
    // A record made while it is down (as an answer that ends in the outage makes one): its write fails
    // and it waits in the recorder for the next one, not dropped. (This process's journal is read back
    // only by a process started after it dies: what is stored below was kept in memory, docs/testing.md's
    // claim, not replayed from the journal.)
    app.container.usage.record({
      usageId: randomUUID(), requestId: 'restart-kept', organizationId, deploymentId: running.id, apiKeyId: key.id, userId: null, route: 'POST /v1/chat/completions',
      model: 'qwen2.5-instruct', promptTokens: 1, completionTokens: 1, totalTokens: 2, unit: 'token', quantity: 2, outcome: 'completed', estimated: false, recordedAt: new Date(),
    });
    await app.container.usage.flush();
    expect(app.container.usage.waiting).toBeGreaterThan(0);
    await startPostgres();
    postgresDown = false;
    await waitUntil(async () => (await health()) === 200, '/healthz to answer 200 once Postgres is back', 60_000);
    expect((await readiness()).status).toBe(200);
    up = true;
    await duringOutage;
    const afterRestart = completed.length;
    await loop(() => completed.length >= afterRestart + 5);
    expect([...failures.keys()].filter((status) => status < 500), 'only the outage may fail a request, with a 5xx').toEqual([]);
    // The loop ran through the outage: its requests were answered, with a 5xx (none in full: the key's
    // limits and the usage need the database), never with a dropped connection.
    expect([...failures.values()].reduce((sum, n) => sum + n, 0)).toBeGreaterThan(0);
    completed.push(...completedWhileDown);

    // The job queued before the outage and one queued after the restart each run once (pg-boss reconnected).
    const after = await deployment(app, owner, 'requested', { model_name: 'mistral-instruct-v0.3' });
    for (const queued of [before, after]) {
      const { engine_model_uid } = await untilStatus(owner, queued.id, 'running', 60_000);
      expect(app.simulator?.launches.filter((launch) => launch.modelUid === engine_model_uid)).toHaveLength(1);
    }

    // Every answer the client received in full has its usage record, once.
    await app.container.usage.flush();
    expect(app.container.usage.waiting).toBe(0);
    const recorded = await app.db('usage_records').where({ api_key_id: key.id }).pluck('request_id');
    expect(recorded.filter((id: string) => completed.includes(id)).sort()).toEqual([...completed].sort());
    expect(recorded.filter((id: string) => id === 'restart-kept')).toHaveLength(1);
    expect(new Set(recorded).size).toBe(recorded.length);
  });
});
