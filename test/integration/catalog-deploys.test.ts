import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchHostedModels } from '../../src/hosted/hosted-launch.ts';
import { createLogger } from '../../src/logger.ts';
import { DEFAULT_WORKERS, registerLocalCluster, startLocalSimulators } from '../../src/local/local-cluster.ts';
import type { ClusterSimulator } from '../../src/local/cluster-simulator.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { untilStatus } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';

/**
 * Every catalog model deploys under `make run` (issue #31): the simulators as `make run` starts
 * them (the dedicated cluster's three workers, the hosted models on a simulator of their own), and
 * as an operator may register one cluster for both uses (one simulator, registered twice); the four
 * hosted models launched either way. Each enabled catalog entry is created with its catalog
 * defaults, as a newcomer would, one after the other. Each one that fits the dedicated workers' GPUs
 * reaches `running`; one that fits none is refused at instance selection, never at capacity or on
 * the engine.
 */

/** GPU memory of the largest dedicated worker: what the largest placement can have. */
const LARGEST_INSTANCE_GB = Math.max(...DEFAULT_WORKERS.map((worker) => worker.gpuCount * worker.gpuMemoryGb));

describe.each([
  { setup: 'make run: the hosted models on a simulator of their own', shared: false },
  { setup: 'one cluster registered both as dedicated and as hosted', shared: true },
])('the catalog, $setup', ({ shared }) => {
  let app: TestApp;
  let user: SignedInUser;
  let simulators: { dedicated: ClusterSimulator; hosted: ClusterSimulator };

  beforeAll(async () => {
    app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' }, { workers: true });
    const log = createLogger('silent');
    simulators = await startLocalSimulators({ log, port: 0, hostedPort: 0, modelLoadMs: 50 });
    await registerLocalCluster(app.container.clusters, simulators.dedicated, log, shared ? simulators.dedicated : simulators.hosted);
    const hosted = await launchHostedModels({ db: app.db, clusters: app.container.clusters }, { pollMs: 20 });
    expect(hosted.map((outcome) => outcome.state)).toEqual(hosted.map(() => 'running'));
    user = await registeredUser(app);
  }, 60_000);
  afterAll(async () => {
    await app?.close();
    await Promise.all([simulators?.dedicated.stop(), simulators?.hosted.stop()]);
  });

  it('deploys every enabled catalog model that fits the simulator to running, each with its catalog defaults', async () => {
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
