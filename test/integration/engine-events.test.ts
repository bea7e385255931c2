import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { engineModelUid } from '../../src/deployments/provisioning.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment, untilStatus } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { StreamReader } from '../helpers/event-stream.ts';
import { waitUntil } from '../helpers/net.ts';

/**
 * The serving engine's events of a deployment's replicas in the deployment's event log
 * (`deployment.engine_event`), read through its event stream: a launch that fails, a model that
 * dies and is recreated, and never an event of another deployment's model. The cluster simulator
 * records events as Xinference 3.2 does (dev/simulator/events.ts): "Launch model", "Terminate
 * model", "Recreate model" (under a bounded recover budget, set here) and inference errors; a
 * failed load is no ERROR event on the engine: its error is the replica's message, which the
 * `failed` status change carries.
 */
type DeploymentEvent = components['schemas']['DeploymentEvent'];

let app: TestApp;
let owner: SignedInUser;

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' }, { workers: true, cluster: { modelLoadMs: 1_500, simulator: { autoRecoverLimit: 3 } } });
  owner = await registeredUser(app);
}, 60_000);
afterAll(() => app?.close());

const simulator = () => {
  if (!app.simulator) throw new Error('no simulator');
  return app.simulator;
};

/** The deployment's whole event stream, read until the server ends it (a failed deployment's stream ends). */
async function streamUntilEnd(deploymentId: string): Promise<DeploymentEvent[]> {
  const { reader } = await StreamReader.open(owner.browser, deploymentId);
  try {
    await reader.closedByServer('the stream of a failed deployment to end', 30_000);
    return reader.events.map((event) => event.data);
  } finally {
    reader.close();
  }
}

/** The engine events of a log, as the engine would list them. */
const engineEvents = (events: readonly DeploymentEvent[]) =>
  events.filter((event) => event.type === 'deployment.engine_event').map((event) => ({ level: event.engine_event?.level, message: event.message, replica: event.engine_event?.replica }));

/** A deployment whose launch the simulator fails (any launch's: the tests of this file run one after another). */
async function failingLaunch(kind: 'oom' | 'error'): Promise<{ id: string; events: DeploymentEvent[] }> {
  simulator().failNextLaunch(kind);
  const created = await deployment(app, owner, 'requested');
  await waitUntil(async () => (await owner.api.GET('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: created.id } } })).data?.status === 'failed', 'the launch to fail');
  return { id: created.id, events: await streamUntilEnd(created.id) };
}

describe('engine events in the deployment’s events', () => {
  for (const [kind, error] of [
    ['oom', /^CUDA out of memory/],
    ['error', /^Engine core initialization failed/],
  ] as const) {
    it(`shows the engine's events of a launch that fails (${kind}), with their level and time, before the change to failed that says why`, async () => {
      const before = Math.floor(Date.now() / 1000) * 1000;
      const { id, events } = await failingLaunch(kind);
      const failedAt = events.findIndex((event) => event.to_status === 'failed' && event.type === 'deployment.status_changed');
      const engine = events.filter((event) => event.type === 'deployment.engine_event');
      // The engine reports the launch to the worker, then the worker's cleanup of the failed load.
      expect(engineEvents(events)).toEqual([
        { level: 'info', message: 'Launch model', replica: 0 },
        { level: 'info', message: 'Terminate model', replica: 0 },
      ]);
      for (const event of engine) {
        expect(events.indexOf(event)).toBeLessThan(failedAt);
        expect(event).toMatchObject({ deployment_id: id, from_status: null, step: null, scale: null, failure_stage: null });
        const at = Date.parse(event.engine_event?.occurred_at ?? '');
        expect(at).toBeGreaterThanOrEqual(before);
        expect(at).toBeLessThanOrEqual(Date.now());
        expect(at % 1000).toBe(0);
      }
      expect(events[failedAt]).toMatchObject({ failure_stage: kind === 'oom' ? 'capacity' : 'model_launch', message: expect.stringMatching(error) });
      // Read once: the stored log holds each engine event once, whatever read it again.
      expect(engineEvents(events)).toHaveLength(simulator().engineEvents(engineModelUid(id)).length);
    });
  }

  it('shows a running model that died and was recreated: the engine’s warning and its relaunch', async () => {
    const created = await deployment(app, owner, 'running');
    const { reader } = await StreamReader.open(owner.browser, created.id);
    try {
      await reader.until((events) => events.some((event) => event.to_status === 'running'), 'the history');
      expect(simulator().crash(engineModelUid(created.id))).toBe(true);
      // The reconciler reads the engine's events when it sees the model not ready, and again once it serves again.
      await reader.until(
        (events) => events.some((event) => event.type === 'deployment.engine_event' && event.message === 'Recreate model') && engineEvents(events).filter((event) => event.message === 'Launch model').length === 2,
        'the recreation and the relaunch',
      );
      const engine = engineEvents(reader.events.map((event) => event.data));
      expect(engine.filter((event) => event.message === 'Recreate model')).toEqual([{ level: 'warning', message: 'Recreate model', replica: 0 }]);
      // The first launch, read back with the rest (the engine keeps its events), then the recovery's.
      expect(engine.map((event) => event.message)).toEqual(['Launch model', 'Recreate model', 'Launch model']);
      for (const event of reader.events.filter((e) => e.data.type === 'deployment.engine_event')) expect(event.data.to_status).toBe('running');
      const { data: after } = await owner.api.GET('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: created.id } } });
      expect(after?.status).toBe('running');
    } finally {
      reader.close();
    }
  });

  it('shows the engine’s events of a second replica that fails to start, under its ordinal, before the scale action that replaces it', async () => {
    const { data: created } = await owner.api.POST('/api/v1/model-deployments', { body: { model_name: 'qwen2.5-instruct', min_replicas: 2, max_replicas: 2 } });
    if (!created) throw new Error('create failed');
    // Replica 1 is launched by the scale job once the deployment runs.
    simulator().failNextLaunch('error', engineModelUid(created.id, 1));
    const { reader } = await StreamReader.open(owner.browser, created.id);
    try {
      await reader.until((events) => events.some((event) => event.scale?.reason === 'replica_failed'), 'the failed replica replaced');
      const events = reader.events.map((event) => event.data);
      const replaced = events.findIndex((event) => event.scale?.reason === 'replica_failed');
      const replicaOne = events.filter((event) => event.engine_event?.replica === 1);
      expect(replicaOne.map((event) => [event.engine_event?.level, event.message])).toEqual([
        ['info', 'Launch model'],
        ['info', 'Terminate model'],
      ]);
      for (const event of replicaOne) expect(events.indexOf(event)).toBeLessThan(replaced);
      expect(events[replaced]?.message).toMatch(/Engine core initialization failed/);
    } finally {
      reader.close();
    }
  });

  it('never shows an event of another deployment’s model: each log holds its own replicas’ engine events only', async () => {
    const healthy = await deployment(app, owner, 'running');
    const healthyUid = engineModelUid(healthy.id);
    // The healthy model dies and is recreated while the other's launch fails.
    expect(simulator().crash(healthyUid)).toBe(true);
    const failing = await failingLaunch('oom');
    const failingUid = engineModelUid(failing.id);
    const { reader } = await StreamReader.open(owner.browser, healthy.id);
    try {
      await reader.until((events) => engineEvents(events).filter((event) => event.message === 'Launch model').length === 2, 'the healthy model’s recovery');
      const healthyEvents = reader.events.map((event) => event.data);
      expect(engineEvents(healthyEvents)).toEqual(simulator().engineEvents(healthyUid).map((event) => ({ level: event.event_type.toLowerCase(), message: event.event_content, replica: 0 })));
      expect(engineEvents(failing.events)).toEqual(simulator().engineEvents(failingUid).map((event) => ({ level: event.event_type.toLowerCase(), message: event.event_content, replica: 0 })));
      expect(JSON.stringify(healthyEvents)).not.toContain(failingUid);
      expect(JSON.stringify(failing.events)).not.toContain(healthyUid);
      expect(healthyEvents.every((event) => event.deployment_id === healthy.id)).toBe(true);
    } finally {
      reader.close();
    }
    await untilStatus(owner, healthy.id, 'running');
  });
});
