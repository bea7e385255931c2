import type { Knex } from 'knex';
import type { PgBoss } from 'pg-boss';
import type { Logger } from 'pino';
import { EngineError, type LaunchSpec, type ModelState } from '../adapters/xinference.ts';
import type { ClustersService } from '../clusters/clusters.service.ts';
import type { Config } from '../config.ts';
import type { DeploymentReplicaRow } from '../db/models/deployment-replicas.ts';
import type { DeploymentRow } from '../db/models/deployments.ts';
import { retryingTransaction } from '../db/transactions.ts';
import { chainedJob, sendLater, startChain, type JobDefinition } from '../jobs/queue.ts';
import {
  allows,
  nextStatus,
  replicaMove,
  SERVING,
  statusesAllowing,
  transition,
  type DeploymentEvent,
  type DeploymentStatus,
  type FailureStage,
  type ReplicaStatus,
} from './deployment-states.ts';
import {
  findDeployment,
  findFailedHoldingGpus,
  findPlacedDeployment,
  findPlacedReplicas,
  findReplicasOf,
  findUnmovedSince,
  findWithReadyReplicas,
  insertAllocation,
  insertReplica,
  lockInStatus,
  lockPlacementCandidates,
  moveReplicas,
  recordEngineHealth,
  toCandidate,
  type DeploymentWithReplicas,
  type PlacedDeployment,
  type PlacedReplica,
} from './deployments.repository.ts';
import { moveDeployment, recordProvisioningStep } from './deployment-changes.ts';
import type { EngineLog } from './engine-log.ts';
import { requiredGpuMemoryGb, selectPlacement } from './instance-selection.ts';
import { loadingMessage } from '../events/event-messages.ts';
import { releaseGpus } from '../clusters/gpu-ledger.ts';
import type { HostedModelEndpointRow } from '../db/models/hosted-model-endpoints.ts';
import { failHostedEndpoint, findRunningHostedEndpoints, recordHostedHealth } from '../hosted/hosted-models.repository.ts';

export const PROVISION_QUEUE = 'provision-deployment';
export const AWAIT_READY_QUEUE = 'await-deployment-ready';
export const TERMINATE_QUEUE = 'terminate-deployment';
export const RECONCILE_QUEUE = 'reconcile-deployments';

/** The job whose step moves a deployment on by each event of the state machine. */
const STEP_OF: { readonly [event in DeploymentEvent]?: string } = {
  placed: PROVISION_QUEUE,
  launched: PROVISION_QUEUE,
  ready: AWAIT_READY_QUEUE,
  cleaned_up: TERMINATE_QUEUE,
};
const STEPPED_EVENTS = Object.keys(STEP_OF) as DeploymentEvent[];

/** The job that moves a deployment in `status` on, if a step does (the reconciler resumes it). */
function stepOf(status: DeploymentStatus): string | undefined {
  const event = STEPPED_EVENTS.find((candidate) => allows(status, candidate));
  return event && STEP_OF[event];
}

/** Statuses a provisioning step moves on from: a deployment stuck in one has lost its step. */
const STEPPED_STATUSES = [...new Set(STEPPED_EVENTS.flatMap(statusesAllowing))];

/** Takes a replica the engine lost out of a deployment that still serves through others, and replaces it. */
export type ReplicaLost = (deploymentId: string, replicaId: string, reason: string, log: Logger) => Promise<void>;

interface DeploymentJob {
  deploymentId: string;
  /** A terminate job for a model launched after its deployment had left provisioning. */
  strayLaunch?: boolean;
}

/**
 * The engine's id of a deployment's replica: fixed by the deployment id and the replica's ordinal, so
 * a retried launch is recognised. Replica 0 is the deployment's model as it was always named,
 * `dep-<id>`; replica k > 0 is `dep-<id>-r<k>` (docs/decisions/2026-11-29-elastic-deployments.md).
 */
export function engineModelUid(deploymentId: string, ordinal = 0): string {
  const uid = `dep-${deploymentId.replaceAll('-', '')}`;
  return ordinal === 0 ? uid : `${uid}-r${ordinal}`;
}

/** What the engine is asked to launch for a replica of a placed deployment: the deployment's model on the replica's GPUs. */
export function launchSpecOf(deployment: PlacedDeployment, replica: PlacedReplica): LaunchSpec {
  return {
    modelUid: replica.engine_model_uid,
    modelName: deployment.model_name,
    modelType: deployment.model_type,
    modelEngine: deployment.model_engine,
    modelFormat: deployment.model_format,
    modelSizeInBillions: Number(deployment.model_size_in_billions),
    quantization: deployment.quantization,
    gpuCount: replica.gpu_count,
    workerAddress: replica.engine_worker,
  };
}

/** The replicas whose model the engine may still have: all but the stopped ones. */
const LIVE_REPLICAS: readonly ReplicaStatus[] = ['starting', 'ready', 'draining', 'stopping', 'failed'];

/** What the provision step launches: the placed deployment and its replicas still starting. */
interface Placed {
  deployment: PlacedDeployment;
  replicas: PlacedReplica[];
}

/**
 * Provisioning in the background, one idempotent job per step (place, launch, wait until ready,
 * terminate) keyed by the deployment id. Each step re-reads the deployment under its row lock and
 * acts only from the state it expects, so a retried or duplicated step does nothing twice; a
 * reconciler resumes steps a dead worker left and notices engines that lost a running model.
 * Lock order: the deployment's row first, then its replicas, then what the step books or releases
 * in the GPU ledger; a deadlock or serialization failure runs again (`retryingTransaction`; see
 * docs/decisions/2026-11-28-one-lock-order-and-retried-transactions.md). A deployment serves
 * through its replicas (`deployment_replicas`, one today), each an engine model on GPUs of its own:
 * each step acts on each of them, and a replica's GPUs are freed only once the engine confirms its
 * model gone (docs/engine.md, Termination).
 */
export class Provisioner {
  readonly #db: Knex;
  readonly #boss: PgBoss;
  readonly #clusters: ClustersService;
  readonly #settings: Config['provisioning'];

  /** What takes a lost replica of a deployment that still serves out and replaces it (the scaler's). */
  readonly #replicaLost: ReplicaLost | undefined;
  /** What brings the engine's events of a deployment's replicas into its event log, when one fails or recovers. */
  readonly #engineLog: EngineLog | undefined;

  constructor(deps: { db: Knex; boss: PgBoss; clusters: ClustersService; settings: Config['provisioning']; replicaLost?: ReplicaLost; engineLog?: EngineLog }) {
    this.#db = deps.db;
    this.#replicaLost = deps.replicaLost;
    this.#engineLog = deps.engineLog;
    this.#boss = deps.boss;
    this.#clusters = deps.clusters;
    this.#settings = deps.settings;
  }

  /** requested → provisioning (instance chosen, GPUs allocated, replica 0 made) → each replica launched → starting. */
  async provision(deploymentId: string, log: Logger, lastAttempt: boolean): Promise<void> {
    const placed = await this.#place(deploymentId, log);
    if (!placed) return;
    const { deployment } = placed;
    try {
      const client = await this.#clusters.clientOf(deployment.cluster_id as string);
      for (const replica of placed.replicas) {
        const outcome = await client.launch(launchSpecOf(deployment, replica));
        log.info({ deployment_id: deploymentId, replica: replica.ordinal, outcome }, 'model launched');
      }
    } catch (error) {
      if (!(error instanceof EngineError)) throw error;
      const transient = error.kind === 'unavailable' || error.kind === 'credentials';
      if (transient && !lastAttempt) throw error;
      const stage: FailureStage = transient ? 'instance_provisioning' : error.kind === 'capacity' ? 'capacity' : 'model_launch';
      await this.fail(deploymentId, stage, `The engine refused to launch the model: ${error.message}`, log);
      return;
    }
    const moved = await this.#move(deploymentId, deployment.status, 'launched');
    if (moved) {
      await this.#soon(AWAIT_READY_QUEUE, deploymentId, 0);
      return;
    }
    // Deleted or failed while the launch was on its way: the engine has a model nobody waits for.
    log.warn({ deployment_id: deploymentId }, 'the deployment left provisioning during its launch: stopping the model on the engine');
    await this.#boss.send(TERMINATE_QUEUE, { deploymentId, strayLaunch: true }, { singletonKey: `${deploymentId}:stray` });
  }

  /**
   * starting → running once every replica is READY and the model answers; failed when a replica
   * failed (at `capacity` when the engine ran out of GPU memory or slots, else at `model_launch`).
   */
  async awaitReady(deploymentId: string, log: Logger): Promise<void> {
    const deployment = await findDeployment(this.#db, deploymentId);
    if (!deployment || !allows(deployment.status, 'ready') || !deployment.cluster_id) return;
    const replicas = await findReplicasOf(this.#db, deploymentId, ['starting']);
    if (!replicas.length) return;
    let state: ModelState;
    let reported = true;
    try {
      const client = await this.#clusters.clientOf(deployment.cluster_id);
      state = worstState(await Promise.all(replicas.map((replica) => client.state(replica.engine_model_uid))));
    } catch (error) {
      if (!(error instanceof EngineError && error.kind === 'credentials')) throw error;
      // The cluster's calls are stopped until an operator fixes its credentials: look again later.
      log.warn({ deployment_id: deploymentId, err: error.message }, 'cannot check a loading model: the cluster credentials were refused');
      state = { state: 'loading', progress: 0 };
      reported = false;
    }
    if (state.state === 'ready') {
      if (await this.#move(deploymentId, deployment.status, 'ready')) log.info({ deployment_id: deploymentId }, 'deployment running');
      return;
    }
    if (state.state === 'error') return this.fail(deploymentId, state.capacity ? 'capacity' : 'model_launch', state.message, log);
    if (state.state === 'missing') return this.fail(deploymentId, 'model_launch', 'The engine no longer knows the model it was loading.', log);
    if (reported && state.state === 'loading') {
      // Progress for the deployment's event stream, appended when it moved by a percent or more.
      const progress = Math.min(1, Math.max(0, Math.floor(state.progress * 100) / 100));
      await recordProvisioningStep(this.#db, deploymentId, { status: deployment.status, step: 'model_loading', progress, message: loadingMessage(progress) });
    }
    const loadingFor = (Date.now() - deployment.status_changed_at.getTime()) / 1000;
    if (loadingFor > this.#settings.startTimeoutSeconds) {
      return this.fail(deploymentId, 'health_check', `The model was not ready after ${Math.round(loadingFor)} seconds.`, log);
    }
    await this.#soon(AWAIT_READY_QUEUE, deploymentId, this.#settings.readinessPollSeconds);
  }

  /**
   * terminating → terminated: the model stopped on the engine, then its GPUs released. Also the
   * cleanup of a failed deployment that still holds GPUs. A launch in progress is waited out.
   */
  async terminate(deploymentId: string, log: Logger, strayLaunch = false): Promise<void> {
    const deployment = await findDeployment(this.#db, deploymentId);
    if (!deployment) return;
    if (strayLaunch) {
      // A launch that landed after its deployment had left provisioning: only the engine is cleaned,
      // whatever its replicas' rows say (the model may have come after they were stopped).
      if ((await this.#stopOnEngine(deployment, await findReplicasOf(this.#db, deploymentId))) === 'pending') {
        await sendLater(this.#boss, TERMINATE_QUEUE, { deploymentId, strayLaunch: true }, { singletonKey: `${deploymentId}:stray`, afterSeconds: this.#settings.readinessPollSeconds });
      }
      return;
    }
    const live = await findReplicasOf(this.#db, deploymentId, LIVE_REPLICAS);
    const terminating = allows(deployment.status, 'cleaned_up');
    // A failed deployment's live replicas are those whose GPUs are still held.
    const cleanup = deployment.status === 'failed' && live.length > 0;
    if (!terminating && !cleanup) return;
    if ((await this.#stopOnEngine(deployment, live)) === 'pending') {
      log.info({ deployment_id: deploymentId }, 'waiting for the engine to finish launching the model before deleting it');
      await recordProvisioningStep(this.#db, deploymentId, {
        status: deployment.status,
        step: 'model_stopping',
        progress: null,
        message: 'Waiting for the engine to finish launching the model before stopping it.',
      });
      await this.#soon(TERMINATE_QUEUE, deploymentId, this.#settings.readinessPollSeconds);
      return;
    }
    await retryingTransaction(this.#db, async (trx) => {
      const status = await lockInStatus(trx, deploymentId, [deployment.status]);
      if (!status) return;
      // Terminated: its replicas stop with it (moveDeployment); a failed one's cleanup stops them alone.
      const to = transition(status, 'cleaned_up');
      if (to) await moveDeployment(trx, deploymentId, { from: status, to });
      else await moveReplicas(trx, deploymentId, replicaMove('stopped'));
    });
    log.info({ deployment_id: deploymentId }, cleanup ? 'failed deployment cleaned up: its GPUs are free' : 'deployment terminated');
  }

  /**
   * Any non-terminal state → failed. Its GPUs are released when the engine confirms the model is
   * gone; otherwise they stay allocated and the cleanup step (the terminate job) confirms later.
   */
  async fail(deploymentId: string, stage: FailureStage, reason: string, log: Logger): Promise<void> {
    const deployment = await findDeployment(this.#db, deploymentId);
    if (!deployment || !allows(deployment.status, 'fail')) return;
    let stopped = false;
    try {
      stopped = (await this.#stopOnEngine(deployment, await findReplicasOf(this.#db, deploymentId, LIVE_REPLICAS))) === 'stopped';
    } catch (error) {
      log.warn({ deployment_id: deploymentId, err: String(error) }, 'could not stop the model; its GPUs stay allocated until the engine confirms');
    }
    // The engine's account of the failure (its events of the replicas) goes before the change to failed.
    await this.#engineLog?.import(deploymentId, log);
    const failed = await retryingTransaction(this.#db, async (trx) => {
      const status = await lockInStatus(trx, deploymentId, statusesAllowing('fail'));
      if (!status) return false;
      // Replicas the engine confirmed gone stop (their GPUs released); the others fail with the deployment, their GPUs held.
      if (stopped) await moveReplicas(trx, deploymentId, replicaMove('stopped'));
      return moveDeployment(trx, deploymentId, {
        from: status,
        to: nextStatus(status, 'fail'),
        changes: { failure_stage: stage, failure_reason: reason.slice(0, 1000), engine_unhealthy_since: null },
      });
    });
    if (!failed) return;
    log.warn({ deployment_id: deploymentId, failure_stage: stage }, 'deployment failed');
    if (!stopped) await this.#soon(TERMINATE_QUEUE, deploymentId, this.#settings.readinessPollSeconds);
  }

  /**
   * Resumes steps left behind (and the cleanup of failed deployments still holding GPUs), and
   * checks running deployments on their engine: a model the engine lost fails at once; one the
   * engine reports not ready (auto-recovery) fails only when it has not come back within the grace
   * period.
   */
  async reconcile(log: Logger): Promise<void> {
    const stuckBefore = new Date(Date.now() - this.#settings.stuckAfterSeconds * 1000);
    const stuck = await findUnmovedSince(this.#db, STEPPED_STATUSES, stuckBefore);
    const holding = await findFailedHoldingGpus(this.#db, stuckBefore);
    for (const { id, status } of stuck) {
      const queue = stepOf(status);
      if (queue) await this.#boss.send(queue, { deploymentId: id }, { singletonKey: id });
    }
    // The cleanup of a failed deployment whose model the engine had not confirmed gone.
    for (const { id } of holding) await this.#boss.send(TERMINATE_QUEUE, { deploymentId: id }, { singletonKey: id });
    if (stuck.length || holding.length) log.info({ resumed: stuck.length, cleanups: holding.length }, 'reconciler resumed deployments');

    const running = await findWithReadyReplicas(this.#db, SERVING);
    for (const deployment of running) {
      try {
        await this.#checkRunning(deployment, log);
      } catch (error) {
        log.warn({ deployment_id: deployment.id, err: String(error) }, 'could not check a running deployment');
      }
    }
    for (const endpoint of await findRunningHostedEndpoints(this.#db)) {
      try {
        await this.#checkHosted(endpoint, log);
      } catch (error) {
        log.warn({ hosted_endpoint_id: endpoint.id, err: String(error) }, 'could not check a running hosted model');
      }
    }
  }

  /**
   * A running hosted model, checked as a running deployment is: one the engine lost (eviction,
   * worker death) or failed is marked `failed` at once, one not ready (auto-recovery) only past the
   * recovery grace. A failed one no longer routes, the operator is alerted to run `hosted launch`
   * again, and its GPUs are given back once the engine no longer holds the model.
   */
  async #checkHosted(endpoint: HostedModelEndpointRow, log: Logger): Promise<void> {
    const client = await this.#clusters.clientOf(endpoint.cluster_id);
    const state = await client.state(endpoint.engine_model_uid);
    if (state.state === 'ready') {
      if (endpoint.engine_unhealthy_since) await recordHostedHealth(this.#db, endpoint.id, null);
      return;
    }
    let reason: string;
    if (state.state === 'missing') reason = 'The engine no longer serves the model.';
    else if (state.state === 'error') reason = `The engine reports the model failed: ${state.message}`;
    else if (!endpoint.engine_unhealthy_since) {
      await recordHostedHealth(this.#db, endpoint.id, 'now');
      log.warn({ hosted_endpoint_id: endpoint.id, model: endpoint.model_name, engine_state: state.state }, 'the engine reports a running hosted model not ready; waiting for its recovery');
      return;
    } else {
      const unhealthyFor = (Date.now() - endpoint.engine_unhealthy_since.getTime()) / 1000;
      if (unhealthyFor <= this.#settings.recoveryGraceSeconds) return;
      reason = `The model did not recover on its engine within ${Math.round(unhealthyFor)} seconds.`;
    }
    if (!(await failHostedEndpoint(this.#db, endpoint.id, reason))) return;
    log.error(
      { alert: 'hosted_model_failed', hosted_endpoint_id: endpoint.id, model: endpoint.model_name, cluster_id: endpoint.cluster_id, reason },
      'a hosted model stopped serving: run `hosted launch` again',
    );
    const gone = state.state === 'missing' || (await client.stop(endpoint.engine_model_uid).catch(() => 'pending' as const)) === 'stopped';
    if (gone) await releaseGpus(this.#db, { hostedEndpointId: endpoint.id });
  }

  /**
   * A running deployment's ready replicas on their engine. A replica the engine lost or failed,
   * while others serve, is taken out and replaced (the scale job: `Scaler.replicaLost`); otherwise
   * the deployment is as healthy as its least healthy replica.
   */
  async #checkRunning(deployment: DeploymentWithReplicas, log: Logger): Promise<void> {
    const client = await this.#clusters.clientOf(deployment.cluster_id as string);
    const states = await Promise.all(deployment.replica_uids.map((uid) => client.state(uid)));
    const lost = deployment.replica_ids.filter((_id, i) => states[i]?.state === 'missing' || states[i]?.state === 'error');
    if (lost.length && lost.length < states.length && this.#replicaLost) {
      for (const [i, id] of deployment.replica_ids.entries()) {
        const state = states[i];
        if (state && lost.includes(id)) await this.#replicaLost(deployment.id, id, state.state === 'error' ? state.message : 'The engine no longer serves the replica.', log);
      }
      return;
    }
    const state = worstState(states);
    if (state.state === 'ready') {
      if (deployment.engine_unhealthy_since) {
        await this.#engineLog?.import(deployment.id, log);
        await recordEngineHealth(this.#db, deployment.id, deployment.status, null);
        log.info({ deployment_id: deployment.id }, 'the engine serves the model again');
      }
      return;
    }
    if (state.state === 'missing') {
      await this.fail(deployment.id, 'health_check', 'The engine no longer serves the model.', log);
      return;
    }
    const what = state.state === 'loading' ? 'The engine reports the model loading again.' : state.message;
    if (!deployment.engine_unhealthy_since) {
      await this.#engineLog?.import(deployment.id, log);
      await recordEngineHealth(this.#db, deployment.id, deployment.status, 'now');
      log.warn({ deployment_id: deployment.id, engine_state: state.state }, 'the engine reports a running model not ready; waiting for its recovery');
      return;
    }
    const unhealthyFor = (Date.now() - deployment.engine_unhealthy_since.getTime()) / 1000;
    if (unhealthyFor > this.#settings.recoveryGraceSeconds) {
      await this.fail(deployment.id, 'health_check', `The model did not recover on its engine within ${Math.round(unhealthyFor)} seconds: ${what}`, log);
    }
  }

  /** Chooses the instance and allocates GPUs once; returns what the launch needs, or nothing to do. */
  async #place(deploymentId: string, log: Logger): Promise<Placed | undefined> {
    return retryingTransaction(this.#db, async (trx) => {
      const deployment = await findDeployment(trx, deploymentId, { forUpdate: true });
      if (!deployment) return undefined;
      if (allows(deployment.status, 'placed')) {
        if (!(await this.#allocate(trx, deployment, log))) return undefined;
      } else if (!allows(deployment.status, 'launched')) {
        return undefined;
      }
      const placed = await findPlacedDeployment(trx, deploymentId);
      return placed && { deployment: placed, replicas: await findPlacedReplicas(trx, deploymentId, 'starting') };
    });
  }

  /**
   * requested → provisioning: the cheapest instance with room gets the GPUs, booked for the
   * deployment's replica 0 (the deployment shows its placement); false when none has (→ failed).
   * The replica is a new row: no other transaction waits on it, so it goes after the ledger.
   */
  async #allocate(trx: Knex.Transaction, deployment: DeploymentRow, log: Logger): Promise<boolean> {
    const required = requiredGpuMemoryGb(Number(deployment.model_size_in_billions), deployment.quantization);
    const candidates = (await lockPlacementCandidates(trx)).map(toCandidate);
    const selection = selectPlacement(candidates, required, deployment.instance_type);
    if (!selection.ok) {
      await moveDeployment(trx, deployment.id, {
        from: deployment.status,
        to: nextStatus(deployment.status, 'fail'),
        changes: { failure_stage: selection.stage, failure_reason: selection.reason },
      });
      log.warn({ deployment_id: deployment.id, failure_stage: selection.stage }, 'deployment failed');
      return false;
    }
    const { placement } = selection;
    const allocationId = await insertAllocation(trx, { deployment_id: deployment.id, instance_id: placement.instanceId, gpu_count: placement.gpuCount });
    const engineUid = engineModelUid(deployment.id, 0);
    await insertReplica(trx, { deployment_id: deployment.id, organization_id: deployment.organization_id, ordinal: 0, engine_model_uid: engineUid, gpu_allocation_id: allocationId });
    return moveDeployment(trx, deployment.id, {
      from: deployment.status,
      to: nextStatus(deployment.status, 'placed'),
      changes: {
        cluster_id: placement.clusterId,
        instance_id: placement.instanceId,
        gpu_allocation_id: allocationId,
        selected_instance_type: placement.instanceType.name,
        selection_reason: placement.reason,
        engine_model_uid: engineUid,
      },
    });
  }

  /** Takes the state machine's `event` from `from`, if the deployment is still there. */
  async #move(deploymentId: string, from: DeploymentStatus, event: DeploymentEvent): Promise<boolean> {
    const to = transition(from, event);
    return to !== null && retryingTransaction(this.#db, (trx) => moveDeployment(trx, deploymentId, { from, to }));
  }

  async #soon(queue: string, deploymentId: string, afterSeconds: number): Promise<void> {
    await sendLater(this.#boss, queue, { deploymentId }, { singletonKey: deploymentId, afterSeconds });
  }

  /** Whether the engine confirms the models of these replicas of the deployment gone (`pending` while one is launching). */
  async #stopOnEngine(deployment: DeploymentRow, replicas: readonly DeploymentReplicaRow[]): Promise<'stopped' | 'pending'> {
    if (!deployment.cluster_id || !replicas.length) return 'stopped';
    const client = await this.#clusters.clientOf(deployment.cluster_id);
    let outcome: 'stopped' | 'pending' = 'stopped';
    for (const replica of replicas) if ((await client.stop(replica.engine_model_uid)) === 'pending') outcome = 'pending';
    return outcome;
  }
}

/**
 * The state of a deployment's replicas' models taken together, as the worst of them: a failed or
 * lost model first, then one not ready; ready when all are.
 */
function worstState(states: readonly ModelState[]): ModelState {
  return states.find((s) => s.state === 'error' || s.state === 'missing') ?? states.find((s) => s.state !== 'ready') ?? { state: 'ready' };
}

/** The provisioning jobs: each step keyed by deployment id (one queued at a time), and the reconciler. */
export function provisioningJobs(provisioner: Provisioner, boss: PgBoss, settings: Config['provisioning']): JobDefinition[] {
  const step = (queue: string, run: (data: DeploymentJob, log: Logger, lastAttempt: boolean) => Promise<void>): JobDefinition<DeploymentJob> => ({
    queue,
    policy: 'short',
    retryLimit: 5,
    retryDelaySeconds: 2,
    concurrency: 8,
    handle: (data, { log, lastAttempt }) => run(data, log, lastAttempt),
  });
  return [
    step(PROVISION_QUEUE, ({ deploymentId }, log, lastAttempt) => provisioner.provision(deploymentId, log, lastAttempt)),
    step(AWAIT_READY_QUEUE, ({ deploymentId }, log) => provisioner.awaitReady(deploymentId, log)),
    step(TERMINATE_QUEUE, ({ deploymentId, strayLaunch }, log) => provisioner.terminate(deploymentId, log, strayLaunch ?? false)),
    chainedJob(boss, { ...RECONCILER, intervalSeconds: settings.reconcileIntervalSeconds }, (log) => provisioner.reconcile(log)),
  ] as JobDefinition[];
}

/** The reconciler's chain: one queued run at a time across all workers. */
const RECONCILER = { queue: RECONCILE_QUEUE, key: 'reconciler' };

/** Starts the reconciler's chain in a worker process. */
export async function startReconciler(boss: PgBoss): Promise<void> {
  await startChain(boss, RECONCILER);
}
