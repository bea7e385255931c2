import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchHostedModels } from '../../src/hosted/hosted-launch.ts';
import { createLogger } from '../../src/logger.ts';
import { DEFAULT_WORKERS, registerLocalCluster, startLocalSimulators } from '../../dev/local-cluster.ts';
import type { ClusterSimulator } from '../../dev/cluster-simulator.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { untilStatus } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';

/**
 * Every catalog model deploys under `make run`: the simulators as `make run` starts
 * them (the dedicated cluster's three workers, the hosted models on a simulator of their own), and
 * as an operator may register one cluster for both uses (one simulator, registered twice); the four
 * hosted models launched either way. Each enabled catalog entry is created with its catalog
 * defaults, as a newcomer would, one after the other. Each one that fits the dedicated workers' GPUs
 * reaches `running`; one that fits none is refused at instance selection, never at capacity or on
 * the engine.
 */

/** GPU memory of the largest dedicated worker: what the largest placement can have. */
const LARGEST_INSTANCE_GB = Math.max(...DEFAULT_WORKERS.map((worker) => worker.gpuCount * worker.gpuMemoryGb));

/** One setup: an app with workers, the two simulators registered as `shared` says, the hosted models launched. */
interface Setup {
  app: TestApp;
  user: SignedInUser;
  simulators: { dedicated: ClusterSimulator; hosted: ClusterSimulator };
}

async function startSetup(shared: boolean): Promise<Setup> {
  const app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' }, { workers: true });
  const log = createLogger('silent');
  const simulators = await startLocalSimulators({ log, port: 0, hostedPort: 0, modelLoadMs: 50 });
  await registerLocalCluster(app.container.clusters, simulators.dedicated, log, shared ? simulators.dedicated : simulators.hosted);
  const hosted = await launchHostedModels({ db: app.db, clusters: app.container.clusters }, { pollMs: 20 });
  expect(hosted.map((outcome) => outcome.state)).toEqual(hosted.map(() => 'running'));
  return { app, user: await registeredUser(app), simulators };
}

const SETUPS = [
  { setup: 'make run: the hosted models on a simulator of their own', shared: false },
  { setup: 'one cluster registered both as dedicated and as hosted', shared: true },
];
const setups = new Map<boolean, Setup>();

beforeAll(async () => {
  for (const { shared } of SETUPS) setups.set(shared, await startSetup(shared));
}, 90_000);
afterAll(async () => {
  for (const { app, simulators } of setups.values()) {
    await app.close();
    await Promise.all([simulators.dedicated.stop(), simulators.hosted.stop()]);
  }
});

// The two setups are walked at the same time: each waits on its own provisioning most of the time.
describe('the catalog under make run', () => {
  it.concurrent.each(SETUPS)('deploys every enabled catalog model that fits the simulator to running, each with its catalog defaults ($setup)', async ({ shared }) => {
    const { app, user } = setups.get(shared) as Setup;
    const models: Array<{ model_name: string }> = await app.db('deployable_models').where({ enabled: true }).orderBy('sort_order').select('model_name');
    expect(models.length).toBeGreaterThanOrEqual(20);
    const tooLarge: string[] = [];
    const running: string[] = [];
    for (const { model_name } of models) {
      const { data: plan } = await user.api.POST('/api/v1/model-deployments/plan', { body: { model_name } });
      const required = plan?.launch.required_gpu_memory_gb ?? Number.NaN;
      const { data: created, response } = await user.api.POST('/api/v1/model-deployments', { body: { model_name } });
      expect(response.status, model_name).toBe(201);
      const id = created?.id as string;
      if (required > LARGEST_INSTANCE_GB) {
        const failed = await untilStatus(user, id, 'failed').catch((error: Error) => error);
        expect(String(failed), model_name).toContain('instance_selection');
        tooLarge.push(model_name);
        continue;
      }
      await untilStatus(user, id, 'running');
      running.push(model_name);
      // Free its GPUs for the next one.
      await user.api.DELETE('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: id } } });
      await untilStatus(user, id, 'terminated');
    }
    expect(running).toHaveLength(models.length - tooLarge.length);
    expect(tooLarge).toEqual([]);
  }, 240_000);
});
