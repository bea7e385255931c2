import type { components } from '../../generated/api.d.ts';
import { nextStatus, type DeploymentEvent, type DeploymentStatus } from '../../src/deployments/deployment-states.ts';
import { findDeployment } from '../../src/deployments/deployments.repository.ts';
import { moveDeployment } from '../../src/deployments/deployment-changes.ts';
import type { TestApp } from '../helpers/app.ts';
import type { Api } from '../helpers/browser.ts';
import { waitUntil } from '../helpers/net.ts';

export type Deployment = components['schemas']['Deployment'];
type CreateDeploymentRequest = components['schemas']['CreateDeploymentRequest'];
type FailureStage = components['schemas']['DeploymentFailureStage'];

export interface DeploymentOptions {
  /** What failed, for `failed` (default: the engine failed to load the model). */
  failure?: { stage: FailureStage; reason: string };
  /** How long to wait for `running` or `terminated` (default 30 s). */
  timeoutMs?: number;
}

const SMALL_MODEL: CreateDeploymentRequest = { model_name: 'qwen2.5-instruct' };

/** The events that take a new (`requested`) deployment to the states the repository is used for. */
const EVENTS_FROM_REQUESTED: Partial<Record<DeploymentStatus, DeploymentEvent[]>> = {
  provisioning: ['placed'],
  starting: ['placed', 'launched'],
  failed: ['fail'],
};

/**
 * A deployment of `owner`'s in `state`, created through the API, in one line:
 *
 * - `requested`: as created (it stays so in an app without workers, or whose provisioning is off).
 * - `running`: provisioned by the real workers on the cluster simulator, waited for through the API
 *   (an app with workers and a cluster).
 * - `terminating`: created and deleted through the API, in an app without workers (nothing cleans it up).
 * - `terminated`: deleted through the API; with workers the cleanup job finishes it, without them
 *   the repository records the cleanup.
 * - `provisioning`, `starting`, `failed`: transitions of the state machine applied through the
 *   deployments repository, in an app without workers. The API reaches them only through
 *   provisioning at the engine's pace (or failure injection on the shared simulator); these rows
 *   have no GPUs placed, which is what a test of the API around them needs.
 */
export async function deployment(
  app: TestApp,
  owner: { api: Api },
  state: DeploymentStatus,
  body: CreateDeploymentRequest = SMALL_MODEL,
  options: DeploymentOptions = {},
): Promise<Deployment> {
  const needsWorkers = state === 'running';
  // Nothing else may move it meanwhile (an app with workers would provision or clean it up).
  const needsIdle = state !== 'requested' && state !== 'running' && state !== 'terminated';
  if (needsWorkers && !(app.workers && app.simulator)) throw new Error(`a ${state} deployment needs an app with workers and a cluster`);
  if (needsIdle && app.workers) throw new Error(`a ${state} deployment stays ${state} only in an app without workers`);

  const { data: created, error, response } = await owner.api.POST('/api/v1/model-deployments', { body });
  if (!created) throw new Error(`create deployment failed: ${response.status} ${JSON.stringify(error)}`);
  const read = async () => {
    const { data } = await owner.api.GET('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: created.id } } });
    if (!data) throw new Error(`deployment ${created.id} not found`);
    return data;
  };

  switch (state) {
    case 'requested':
      return created;
    case 'running':
      return untilStatus(owner, created.id, 'running', options.timeoutMs);
    case 'terminating':
    case 'terminated': {
      const { data: deleted } = await owner.api.DELETE('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: created.id } } });
      if (deleted?.status !== 'terminating') throw new Error(`delete answered ${deleted?.status}`);
      if (state === 'terminating') return deleted;
      if (app.workers) return untilStatus(owner, created.id, 'terminated', options.timeoutMs);
      await applyEvents(app, created.id, 'terminating', ['cleaned_up']);
      return read();
    }
    default: {
      const failure = options.failure ?? { stage: 'model_launch', reason: 'The engine failed to load the model.' };
      await applyEvents(app, created.id, 'requested', EVENTS_FROM_REQUESTED[state] ?? [], failure);
      return read();
    }
  }
}

/** Moves the deployment through `events` with the deployments repository, as provisioning would. */
async function applyEvents(app: TestApp, id: string, from: DeploymentStatus, events: DeploymentEvent[], failure?: { stage: FailureStage; reason: string }) {
  let status = from;
  for (const event of events) {
    const to = nextStatus(status, event);
    const changes = event === 'fail' && failure ? { failure_stage: failure.stage, failure_reason: failure.reason } : {};
    if (!(await moveDeployment(app.db, id, { from: status, to, changes }))) {
      throw new Error(`deployment ${id} was no longer ${status} (is ${(await findDeployment(app.db, id))?.status})`);
    }
    status = to;
  }
}

/**
 * Waits through the API until `owner`'s deployment is in `status` (up to `timeoutMs`, 30 s by
 * default); throws at once with the failure when it fails instead.
 */
export async function untilStatus(owner: { api: Api }, id: string, status: DeploymentStatus, timeoutMs = 30_000): Promise<Deployment> {
  let last: Deployment | undefined;
  await waitUntil(
    async () => {
      const { data } = await owner.api.GET('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: id } } });
      last = data;
      return last?.status === status || last?.status === 'failed';
    },
    () => `deployment ${id} to be ${status} (is ${last?.status} ${last?.failure_reason ?? ''})`,
    timeoutMs,
  );
  if (last?.status !== status) throw new Error(`deployment ${id} failed at ${last?.failure_stage}: ${last?.failure_reason}`);
  return last;
}

/**
 * Adds to the catalog a launch combination no instance type can hold (Llama 3.1 at 405B, unquantized),
 * to see instance selection fail. The catalog has no write path for combinations: added here.
 */
export async function unplaceableCombination(app: Pick<TestApp, 'db'>): Promise<CreateDeploymentRequest> {
  await app.db('model_specs').insert({
    deployable_model_id: app.db('deployable_models').where({ model_name: 'llama-3.1-instruct' }).select('id'),
    model_format: 'pytorch',
    model_size_in_billions: 405,
    quantizations: ['none'],
    model_engine: 'vLLM',
  });
  return { model_name: 'llama-3.1-instruct', model_size_in_billions: 405 };
}
