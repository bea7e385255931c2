import { EventSource } from 'eventsource';
import type { Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { loadConfig } from '../../src/config.ts';
import { createDatabase } from '../../src/db/database.ts';
import { moveDeployment } from '../../src/deployments/deployment-changes.ts';
import { createLogger } from '../../src/logger.ts';
import { startRuntime, type Runtime } from '../../src/runtime.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment, untilStatus } from '../factories/deployments.ts';
import { addedMember } from '../factories/organizations.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { checkResponse } from '../helpers/contract.ts';
import { EVENTS_PATH, StreamReader } from '../helpers/event-stream.ts';
import { waitUntil } from '../helpers/net.ts';
import { startServiceProcess, type ServiceProcess } from '../helpers/service-process.ts';

/**
 * The deployment event log and its stream: every status change and provisioning step
 * of a deployment is appended in the transaction of the change, and
 * `GET /api/v1/model-deployments/{id}/events` streams it as server-sent events: the history, then
 * live, resumable with `Last-Event-ID`, whichever process made the change.
 *
 * This test's service is an API process (ROLE=api) with the cluster simulator; the provisioning
 * that moves its deployments runs in ANOTHER process, a worker (`node src/main.ts`, ROLE=worker)
 * on the same database, so every live event crossed processes (LISTEN/NOTIFY).
 */
type DeploymentEvent = components['schemas']['DeploymentEvent'];

let app: TestApp;
let owner: SignedInUser;
let worker: ServiceProcess;
/** A connection of the test's own: a change made on it reaches the service only through Postgres. */
let otherConnection: Knex;

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING, EVENT_STREAM_HEARTBEAT_SECONDS: '0.2', MAX_ACTIVE_RESOURCES: '50' }, { cluster: { modelLoadMs: 1_500 } });
  owner = await registeredUser(app);
  worker = await startServiceProcess(app, { ROLE: 'worker' });
  otherConnection = createDatabase({ url: app.databaseUrl, poolMax: 1 });
}, 60_000);
afterAll(async () => {
  worker?.kill();
  await otherConnection?.destroy();
  await app?.close();
});

/** A deployment of the owner's, created through the API and provisioned by the worker process. */
async function running() {
  const created = await deployment(app, owner, 'requested');
  return untilStatus(owner, created.id, 'running');
}

/** The deployment's whole log, as stored. */
async function logOf(deploymentId: string): Promise<Array<{ id: string; type: string; to_status: string }>> {
  return app.db('deployment_events').where({ deployment_id: deploymentId }).orderBy('id').select('id', 'type', 'to_status');
}

describe('the deployment event stream', () => {
  it('sends the history, then each status change and the loading progress live, as a worker in another process provisions', async () => {
    const created = await deployment(app, owner, 'requested');
    const { response, reader } = await StreamReader.open(owner.browser, created.id);
    try {
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toBe('text/event-stream');
      expect(response.headers.get('cache-control')).toContain('no-cache');
      await reader.until((events) => events.some((e) => e.to_status === 'running'), 'the deployment running');
      expect(reader.retry).toBe(3000);
      expect(reader.statuses()).toEqual(['requested', 'provisioning', 'starting', 'running']);
      const [first, second] = reader.events.map((e) => e.data);
      expect(first).toMatchObject({ type: 'deployment.status_changed', deployment_id: created.id, from_status: null, to_status: 'requested' });
      expect(second).toMatchObject({ from_status: 'requested', to_status: 'provisioning' });
      expect(second?.message).toMatch(/cheapest instance type/);
      // The model loads for 1.5 s, read every 0.2 s: progress steps between starting and running, rising.
      const steps = reader.events.map((e) => e.data).filter((e) => e.type === 'deployment.provisioning_step');
      expect(steps.length).toBeGreaterThan(0);
      for (const step of steps) expect(step).toMatchObject({ step: 'model_loading', to_status: 'starting', from_status: null });
      const progress = steps.map((step) => step.progress ?? -1);
      expect([...progress].sort((a, b) => a - b)).toEqual(progress);
      // Each event's SSE id and name are its id and type; ids rise; the stream is the stored log.
      for (const { id, event, data } of reader.events) {
        expect(id).toBe(String(data.id));
        expect(event).toBe(data.type);
      }
      expect(reader.events.map((e) => e.id)).toEqual((await logOf(created.id)).map((row) => row.id));
    } finally {
      reader.close();
    }
  });

  it('shows termination waiting for a launch in progress as a model_stopping step', async () => {
    const created = await deployment(app, owner, 'requested');
    await untilStatus(owner, created.id, 'starting');
    const { reader } = await StreamReader.open(owner.browser, created.id);
    try {
      await owner.api.DELETE('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: created.id } } });
      await reader.until((events) => events.some((e) => e.to_status === 'terminated'), 'the deployment terminated');
      const after = reader.events.map((e) => e.data).slice(reader.events.findIndex((e) => e.data.to_status === 'terminating'));
      expect(after.map((e) => e.step ?? e.to_status)).toEqual(['terminating', 'model_stopping', 'terminated']);
      expect(after[1]).toMatchObject({ type: 'deployment.provisioning_step', to_status: 'terminating', progress: null });
    } finally {
      reader.close();
    }
  });

  it('resumes after Last-Event-ID: only later events, none again', async () => {
    const created = await running();
    const log = await logOf(created.id);
    const middle = log[1];
    if (!middle) throw new Error('a running deployment has more than one event');
    const { reader } = await StreamReader.open(owner.browser, created.id, { 'Last-Event-ID': middle.id });
    try {
      await reader.until((events) => events.length === log.length - 2, 'the events after the second');
      expect(reader.events.map((e) => e.id)).toEqual(log.slice(2).map((row) => row.id));
    } finally {
      reader.close();
    }
  });

  it('shows a status change made on another database connection, as Postgres notifies it (the stream has no poll to find it otherwise)', async () => {
    const created = await running();
    const { reader } = await StreamReader.open(owner.browser, created.id);
    try {
      await reader.until((events) => events.some((e) => e.to_status === 'running'), 'the history');
      // As a reconciler in some other process would fail it.
      expect(await moveDeployment(otherConnection, created.id, { from: 'running', to: 'failed', changes: { failure_stage: 'health_check', failure_reason: 'The engine no longer serves the model.' } })).toBe(true);
      await reader.until((events) => events.some((e) => e.to_status === 'failed'), 'the failure');
      expect(reader.events.at(-1)?.data).toMatchObject({
        type: 'deployment.status_changed',
        from_status: 'running',
        to_status: 'failed',
        failure_stage: 'health_check',
        message: 'The engine no longer serves the model.',
      });
    } finally {
      reader.close();
    }
  });

  it('ends with an end event and closes once the deployment fails while watched', async () => {
    const created = await running();
    const { reader } = await StreamReader.open(owner.browser, created.id);
    try {
      await reader.until((events) => events.some((e) => e.to_status === 'running'), 'the history');
      expect(reader.end).toBeUndefined();
      expect(await moveDeployment(otherConnection, created.id, { from: 'running', to: 'failed', changes: { failure_stage: 'health_check', failure_reason: 'The engine no longer serves the model.' } })).toBe(true);
      await reader.closedByServer('the stream to end after the failure');
      expect(reader.events.at(-1)?.data).toMatchObject({ type: 'deployment.status_changed', to_status: 'failed' });
      // No id: a client that reconnects resumes after the failure.
      expect(reader.end).toEqual({ id: undefined, data: { type: 'end', deployment_id: created.id, status: 'failed' } });
      expect(reader.events.map((e) => e.id)).toEqual((await logOf(created.id)).map((row) => row.id));
    } finally {
      reader.close();
    }
  });

  it('ends with an end event and closes once the deployment is terminated while watched', async () => {
    const created = await running();
    const { reader } = await StreamReader.open(owner.browser, created.id);
    try {
      await reader.until((events) => events.some((e) => e.to_status === 'running'), 'the history');
      await owner.api.DELETE('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: created.id } } });
      await reader.closedByServer('the stream to end after the termination');
      expect(reader.statuses().slice(-2)).toEqual(['terminating', 'terminated']);
      expect(reader.end?.data).toEqual({ type: 'end', deployment_id: created.id, status: 'terminated' });
    } finally {
      reader.close();
    }
  });

  it('sends the history of a deployment already failed, then end, and closes; resuming sends only what follows, then end', async () => {
    const created = await running();
    expect(await moveDeployment(otherConnection, created.id, { from: 'running', to: 'failed', changes: { failure_stage: 'health_check', failure_reason: 'Gone.' } })).toBe(true);
    const log = await logOf(created.id);
    const opened = await StreamReader.open(owner.browser, created.id);
    await opened.reader.closedByServer('a stream on a failed deployment to end');
    expect(opened.reader.events.map((e) => e.id)).toEqual(log.map((row) => row.id));
    expect(opened.reader.end?.data).toEqual({ type: 'end', deployment_id: created.id, status: 'failed' });
    // Resumed before the failure: the failure, then end.
    const before = log.at(-2)?.id as string;
    const resumed = await StreamReader.open(owner.browser, created.id, { 'Last-Event-ID': before });
    await resumed.reader.closedByServer('a resumed stream to end');
    expect(resumed.reader.events.map((e) => e.id)).toEqual([log.at(-1)?.id]);
    expect(resumed.reader.end?.data.status).toBe('failed');
    // Resumed after the last event (an EventSource reconnecting): only end.
    const caughtUp = await StreamReader.open(owner.browser, created.id, { 'Last-Event-ID': log.at(-1)?.id as string });
    await caughtUp.reader.closedByServer('a caught-up stream to end');
    expect(caughtUp.reader.events).toEqual([]);
    expect(caughtUp.reader.end?.data.status).toBe('failed');
    expect(caughtUp.reader.retry).toBe(3000);
  });

  it('keeps an idle stream open with keep-alive comments', async () => {
    const created = await deployment(app, owner, 'requested');
    const { reader } = await StreamReader.open(owner.browser, created.id);
    try {
      await reader.until(() => reader.comments.length >= 2, 'two keep-alive comments (every 0.2 s here)');
      expect(reader.comments.every((comment) => comment.trim() === 'keep-alive')).toBe(true);
    } finally {
      reader.close();
    }
  });

  it('answers 404 for a deployment of another user, even of the same organization, and for an unknown one', async () => {
    const created = await deployment(app, owner, 'requested');
    const organizationId = (await owner.api.GET('/v1/organization')).data?.id ?? 0;
    const colleague = await addedMember(app, organizationId, 'admin');
    const stranger = await registeredUser(app);
    for (const [caller, id] of [
      [colleague, created.id],
      [stranger, created.id],
      [owner, '0192f1c6-2b9e-7c4e-9b1a-5d0c8e6f7a21'],
    ] as const) {
      const { response } = await StreamReader.open(caller.browser, id);
      expect(response.status).toBe(404);
      expect(((await response.json()) as { code: string }).code).toBe('NOT_FOUND');
    }
  });

  it('refuses a caller without a session (401) and a Last-Event-ID that is not a number (422)', async () => {
    const created = await deployment(app, owner, 'requested');
    const anonymous = await fetch(`${app.url}${EVENTS_PATH.replace('{deployment_id}', created.id)}`);
    await checkResponse('GET', EVENTS_PATH, anonymous);
    expect(anonymous.status).toBe(401);
    const { response } = await StreamReader.open(owner.browser, created.id, { 'Last-Event-ID': 'abc' });
    expect(response.status).toBe(422);
  });
});

describe('an EventSource across a restart of the API process it was connected to', () => {
  let second: Runtime | undefined;
  afterAll(() => second?.stop());

  it('reconnects to another process with Last-Event-ID and receives every event once, in order, including those made while it was away', async () => {
    second = await startRuntime({
      config: loadConfig({ ...app.env, ROLE: 'api', PORT: '0' }),
      log: createLogger('silent'),
      databaseUrl: app.databaseUrl,
      smtpUrl: app.inbox.url,
    });
    const secondUrl = `http://127.0.0.1:${second.port}`;
    const created = await running();
    const cookie = [...owner.browser.cookies].map(([name, value]) => `${name}=${value}`).join('; ');
    const connections: Array<{ base: string; lastEventId: string | null }> = [];
    const received: Array<{ id: string; data: DeploymentEvent }> = [];
    const path = EVENTS_PATH.replace('{deployment_id}', created.id);
    // The first connection goes to the second process, every later one to this test's.
    const source = new EventSource(`${secondUrl}${path}`, {
      fetch: (input, init) => {
        const base = connections.length === 0 ? secondUrl : app.url;
        const headers = new Headers(init?.headers as ConstructorParameters<typeof Headers>[0]);
        headers.set('cookie', cookie);
        connections.push({ base, lastEventId: headers.get('last-event-id') });
        return fetch(new URL(path, base), { ...init, headers } as RequestInit);
      },
    });
    const listener = (event: MessageEvent) => received.push({ id: event.lastEventId, data: JSON.parse(event.data as string) as DeploymentEvent });
    source.addEventListener('deployment.status_changed', listener);
    source.addEventListener('deployment.provisioning_step', listener);
    try {
      await waitUntil(async () => received.some((e) => e.data.to_status === 'running'), 'the history from the second process');
      const lastBefore = received.at(-1)?.id;
      // The second process shuts down (its streams end); meanwhile the deployment is deleted.
      await second.stop();
      second = undefined;
      const { data: deleted } = await owner.api.DELETE('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: created.id } } });
      expect(deleted?.status).toBe('terminating');
      await untilStatus(owner, created.id, 'terminated');
      await waitUntil(async () => received.some((e) => e.data.to_status === 'terminated'), () => `the events after the reconnection (${JSON.stringify(connections)})`);
      expect(connections[1]).toEqual({ base: app.url, lastEventId: lastBefore });
      expect(received.map((e) => e.id)).toEqual((await logOf(created.id)).map((row) => row.id));
      expect(received.filter((e) => e.data.type === 'deployment.status_changed').map((e) => e.data.to_status).slice(-2)).toEqual(['terminating', 'terminated']);
    } finally {
      source.close();
    }
  });
});
