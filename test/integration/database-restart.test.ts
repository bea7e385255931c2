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
 * Postgres restarted under a steady loop of requests (issue #12): `/healthz` answers 503 while it is
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
    const completed: string[] = [];
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
      if (!response) return;
      const text = await response.text().catch(() => undefined);
      if (response.status === 200 && text?.includes('"choices"')) completed.push(id);
      else failures.set(response.status, (failures.get(response.status) ?? 0) + 1);
    };
    /** The steady loop of requests, until `until` says so. */
    const loop = async (until: () => boolean) => {
      while (!until()) await call();
    };

    await loop(() => completed.length >= 5);
    // The last answer's usage is still in the recorder's buffer (written every second) when Postgres goes.
    await call();
    await postgres.stop();
    let up = false;
    const duringOutage = loop(() => up);
    await waitUntil(async () => (await health()) === 503, '/healthz to answer 503 while Postgres is down');
    // Not ready either: a load balancer sends its traffic elsewhere meanwhile.
    expect(await readiness()).toEqual({ status: 503, detail: 'The database does not answer.' });
    // A write of the buffer fails while it is down: the records must wait for the next one, not be dropped.
    await app.container.usage.flush();
    await startPostgres();
    await waitUntil(async () => (await health()) === 200, '/healthz to answer 200 once Postgres is back', 60_000);
    expect((await readiness()).status).toBe(200);
    up = true;
    await duringOutage;
    const afterRestart = completed.length;
    await loop(() => completed.length >= afterRestart + 5);
    expect([...failures.keys()].filter((status) => status < 500), 'only the outage may fail a request, with a 5xx').toEqual([]);

    // A job queued after the restart runs once (pg-boss reconnected).
    const after = await deployment(app, owner, 'requested', { model_name: 'mistral-instruct-v0.3' });
    const { engine_model_uid } = await untilStatus(owner, after.id, 'running', 60_000);
    expect(app.simulator?.launches.filter((launch) => launch.modelUid === engine_model_uid)).toHaveLength(1);

    // Every answer the client received in full has its usage record, once.
    await app.container.usage.flush();
    const recorded = await app.db('usage_records').where({ api_key_id: key.id }).pluck('request_id');
    expect(recorded.filter((id: string) => completed.includes(id)).sort()).toEqual([...completed].sort());
    expect(new Set(recorded).size).toBe(recorded.length);
  });
});
