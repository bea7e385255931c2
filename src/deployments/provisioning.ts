import type { Knex } from 'knex';
import type { PgBoss } from 'pg-boss';
import type { Logger } from 'pino';
import { EngineError, type ModelState } from '../adapters/xinference.ts';
import type { ClustersService } from '../clusters/clusters.service.ts';
import type { Config } from '../config.ts';
import type { JobDefinition } from '../jobs/queue.ts';
import type { DeploymentRow } from './deployments.repository.ts';
import type { FailureStage } from './deployment-states.ts';
import { requiredGpuMemoryGb, selectPlacement, type Candidate } from './instance-selection.ts';

export const PROVISION_QUEUE = 'provision-deployment';
export const AWAIT_READY_QUEUE = 'await-deployment-ready';
export const TERMINATE_QUEUE = 'terminate-deployment';
export const RECONCILE_QUEUE = 'reconcile-deployments';

/** States in which a deployment may still hold GPUs and a model on its engine. */
const LIVE_STATUSES: DeploymentRow['status'][] = ['requested', 'provisioning', 'starting', 'running'];

interface DeploymentJob {
  deploymentId: string;
  /** A terminate job for a model launched after its deployment had left provisioning. */
  strayLaunch?: boolean;
}

/** What launching a placed deployment needs. */
interface PlacedDeployment extends DeploymentRow {
  gpu_count: number;
  engine_worker: string;
  model_type: string;
}

/** The engine's id of a deployment's model: fixed by the deployment id, so a retried launch is recognised. */
export function engineModelUid(deploymentId: string): string {
  return `dep-${deploymentId.replaceAll('-', '')}`;
}

/**
 * Provisioning in the background, one idempotent step per job, each keyed by the deployment id:
 * place (choose the instance and allocate its GPUs), launch on the engine, wait until ready,
 * terminate. Every step re-reads the deployment under a row lock and acts only from the state it
 * expects, so a retried, duplicated or resumed step does nothing twice. A periodic reconciler
 * resumes steps a dead worker left behind and notices engines that lost a running model.
 *
 * GPUs are freed in our database only once the engine confirms the model is gone: a launch in
 * progress is waited out, then deleted (see `XinferenceClient.stop`). A failed deployment whose
 * model could not be confirmed gone keeps its allocation until the cleanup step confirms it.
 */
export class Provisioner {
  readonly #db: Knex;
  readonly #boss: PgBoss;
  readonly #clusters: ClustersService;
  readonly #settings: Config['provisioning'];

  constructor(deps: { db: Knex; boss: PgBoss; clusters: ClustersService; settings: Config['provisioning'] }) {
    this.#db = deps.db;
    this.#boss = deps.boss;
    this.#clusters = deps.clusters;
    this.#settings = deps.settings;
  }

  /** requested → provisioning (instance chosen, GPUs allocated) → launch → starting. */
  async provision(deploymentId: string, log: Logger, lastAttempt: boolean): Promise<void> {
    const placed = await this.#place(deploymentId, log);
    if (!placed) return;
    try {
      const client = await this.#clusters.clientOf(placed.cluster_id as string);
      const outcome = await client.launch({
        modelUid: placed.engine_model_uid as string,
        modelName: placed.model_name,
        modelType: placed.model_type,
        modelEngine: placed.model_engine,
        modelFormat: placed.model_format,
        modelSizeInBillions: Number(placed.model_size_in_billions),
        quantization: placed.quantization,
        gpuCount: placed.gpu_count,
        workerAddress: placed.engine_worker,
      });
      log.info({ deployment_id: deploymentId, outcome }, 'model launched');
    } catch (error) {
      if (!(error instanceof EngineError)) throw error;
      const transient = error.kind === 'unavailable' || error.kind === 'credentials';
      if (transient && !lastAttempt) throw error;
      const stage: FailureStage = transient ? 'instance_provisioning' : error.kind === 'capacity' ? 'capacity' : 'model_launch';
      await this.fail(deploymentId, stage, `The engine refused to launch the model: ${error.message}`, log);
      return;
    }
    const moved = await this.#move(deploymentId, 'provisioning', 'starting');
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
    const deployment: DeploymentRow | undefined = await this.#db('deployments').where({ id: deploymentId }).first();
    if (deployment?.status !== 'starting' || !deployment.cluster_id || !deployment.engine_model_uid) return;
    let state: ModelState;
    try {
      const client = await this.#clusters.clientOf(deployment.cluster_id);
      state = await client.state(deployment.engine_model_uid);
    } catch (error) {
      if (!(error instanceof EngineError && error.kind === 'credentials')) throw error;
      // The cluster's calls are stopped until an operator fixes its credentials: look again later.
      log.warn({ deployment_id: deploymentId, err: error.message }, 'cannot check a loading model: the cluster credentials were refused');
      state = { state: 'loading', progress: 0 };
    }
    if (state.state === 'ready') {
      if (await this.#move(deploymentId, 'starting', 'running')) log.info({ deployment_id: deploymentId }, 'deployment running');
      return;
    }
    if (state.state === 'error') return this.fail(deploymentId, state.capacity ? 'capacity' : 'model_launch', state.message, log);
    if (state.state === 'missing') return this.fail(deploymentId, 'model_launch', 'The engine no longer knows the model it was loading.', log);
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
    const deployment: DeploymentRow | undefined = await this.#db('deployments').where({ id: deploymentId }).first();
    if (!deployment) return;
    if (strayLaunch) {
      // A launch that landed after its deployment had left provisioning: only the engine is cleaned.
      if ((await this.#stopOnEngine(deployment)) === 'pending') {
        await this.#boss.send(TERMINATE_QUEUE, { deploymentId, strayLaunch: true }, {
          singletonKey: `${deploymentId}:stray`,
          startAfter: new Date(Date.now() + this.#settings.readinessPollSeconds * 1000),
        });
      }
      return;
    }
    const cleanup = deployment.status === 'failed' && (await this.#holdsGpus(deploymentId));
    if (deployment.status !== 'terminating' && !cleanup) return;
    if ((await this.#stopOnEngine(deployment)) === 'pending') {
      log.info({ deployment_id: deploymentId }, 'waiting for the engine to finish launching the model before deleting it');
      await this.#soon(TERMINATE_QUEUE, deploymentId, this.#settings.readinessPollSeconds);
      return;
    }
    await this.#db.transaction(async (trx) => {
      const locked = await trx('deployments').where({ id: deploymentId, status: deployment.status }).forUpdate().first('id');
      if (!locked) return;
      await releaseAllocation(trx, deploymentId);
      if (deployment.status === 'terminating') {
        await trx('deployments')
          .where({ id: deploymentId })
          .update({ status: 'terminated', terminated_at: trx.fn.now(), status_changed_at: trx.fn.now() });
      }
    });
    log.info({ deployment_id: deploymentId }, cleanup ? 'failed deployment cleaned up: its GPUs are free' : 'deployment terminated');
  }

  /**
   * Any non-terminal state → failed. Its GPUs are released when the engine confirms the model is
   * gone; otherwise they stay allocated and the cleanup step (the terminate job) confirms later.
   */
  async fail(deploymentId: string, stage: FailureStage, reason: string, log: Logger): Promise<void> {
    const deployment: DeploymentRow | undefined = await this.#db('deployments').where({ id: deploymentId }).first();
    if (!deployment || !LIVE_STATUSES.includes(deployment.status)) return;
    let stopped = false;
    try {
      stopped = (await this.#stopOnEngine(deployment)) === 'stopped';
    } catch (error) {
      log.warn({ deployment_id: deploymentId, err: String(error) }, 'could not stop the model; its GPUs stay allocated until the engine confirms');
    }
    const failed = await this.#db.transaction(async (trx) => {
      const locked = await trx('deployments').where({ id: deploymentId }).whereIn('status', LIVE_STATUSES).forUpdate().first('id');
      if (!locked) return false;
      if (stopped) await releaseAllocation(trx, deploymentId);
      await trx('deployments')
        .where({ id: deploymentId })
        .update({ status: 'failed', failure_stage: stage, failure_reason: reason.slice(0, 1000), status_changed_at: trx.fn.now(), engine_unhealthy_since: null });
      return true;
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
    const stuck: Array<{ id: string; status: string }> = await this.#db('deployments')
      .whereIn('status', ['requested', 'provisioning', 'starting', 'terminating'])
      .where('status_changed_at', '<=', stuckBefore)
      .select('id', 'status');
    const holding: Array<{ id: string; status: string }> = await this.#db('deployments as d')
      .join('gpu_allocations as a', 'a.deployment_id', 'd.id')
      .where({ 'd.status': 'failed', 'a.status': 'active' })
      .where('d.status_changed_at', '<=', stuckBefore)
      .select('d.id', 'd.status');
    for (const { id, status } of [...stuck, ...holding]) {
      const queue = status === 'terminating' || status === 'failed' ? TERMINATE_QUEUE : status === 'starting' ? AWAIT_READY_QUEUE : PROVISION_QUEUE;
      await this.#boss.send(queue, { deploymentId: id }, { singletonKey: id });
    }
    if (stuck.length || holding.length) log.info({ resumed: stuck.length, cleanups: holding.length }, 'reconciler resumed deployments');

    const running: DeploymentRow[] = await this.#db('deployments').where({ status: 'running' }).whereNotNull('cluster_id');
    for (const deployment of running) {
      try {
        await this.#checkRunning(deployment, log);
      } catch (error) {
        log.warn({ deployment_id: deployment.id, err: String(error) }, 'could not check a running deployment');
      }
    }
  }

  async #checkRunning(deployment: DeploymentRow, log: Logger): Promise<void> {
    const client = await this.#clusters.clientOf(deployment.cluster_id as string);
    const state = await client.state(deployment.engine_model_uid as string);
    if (state.state === 'ready') {
      if (deployment.engine_unhealthy_since) {
        await this.#db('deployments').where({ id: deployment.id, status: 'running' }).update({ engine_unhealthy_since: null });
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
      await this.#db('deployments').where({ id: deployment.id, status: 'running' }).whereNull('engine_unhealthy_since').update({ engine_unhealthy_since: this.#db.fn.now() });
      log.warn({ deployment_id: deployment.id, engine_state: state.state }, 'the engine reports a running model not ready; waiting for its recovery');
      return;
    }
    const unhealthyFor = (Date.now() - deployment.engine_unhealthy_since.getTime()) / 1000;
    if (unhealthyFor > this.#settings.recoveryGraceSeconds) {
      await this.fail(deployment.id, 'health_check', `The model did not recover on its engine within ${Math.round(unhealthyFor)} seconds: ${what}`, log);
    }
  }

  async #holdsGpus(deploymentId: string): Promise<boolean> {
    return Boolean(await this.#db('gpu_allocations').where({ deployment_id: deploymentId, status: 'active' }).first('id'));
  }

  /** Chooses the instance and allocates GPUs once; returns what the launch needs, or nothing to do. */
  async #place(deploymentId: string, log: Logger): Promise<PlacedDeployment | undefined> {
    return this.#db.transaction(async (trx) => {
      const deployment: DeploymentRow | undefined = await trx('deployments').where({ id: deploymentId }).forUpdate().first();
      if (!deployment || (deployment.status !== 'requested' && deployment.status !== 'provisioning')) return undefined;
      if (deployment.status === 'requested') {
        const required = requiredGpuMemoryGb(Number(deployment.model_size_in_billions), deployment.quantization);
        // Locking the candidate instances serialises allocation: no GPU is booked twice.
        const rows = await trx('instances as i')
          .join('instance_types as t', 't.id', 'i.instance_type_id')
          .join('clusters as c', 'c.id', 'i.cluster_id')
          .where({ 'i.status': 'available', 'c.status': 'active', 'c.hosted': false })
          .forUpdate('i')
          .select('i.id', 'i.cluster_id', 't.name', 't.gpu_type', 't.gpu_count', 't.gpu_memory_gb', 't.price_per_second');
        const used: Array<{ instance_id: string; gpus: string }> = await trx('gpu_allocations')
          .where({ status: 'active' })
          .whereIn('instance_id', rows.map((row) => row.id))
          .groupBy('instance_id')
          .select('instance_id', trx.raw('sum(gpu_count) as gpus'));
        const usedBy = new Map(used.map((row) => [row.instance_id, Number(row.gpus)]));
        const candidates: Candidate[] = rows.map((row) => ({
          instanceId: row.id,
          clusterId: row.cluster_id,
          freeGpus: row.gpu_count - (usedBy.get(row.id) ?? 0),
          instanceType: {
            name: row.name,
            gpuType: row.gpu_type,
            gpuCount: row.gpu_count,
            gpuMemoryGb: row.gpu_memory_gb,
            pricePerSecond: Number(row.price_per_second),
          },
        }));
        const selection = selectPlacement(candidates, required);
        if (!selection.ok) {
          await trx('deployments')
            .where({ id: deploymentId })
            .update({ status: 'failed', failure_stage: selection.stage, failure_reason: selection.reason, status_changed_at: trx.fn.now() });
          log.warn({ deployment_id: deploymentId, failure_stage: selection.stage }, 'deployment failed');
          return undefined;
        }
        const { placement } = selection;
        const [allocation] = await trx('gpu_allocations')
          .insert({ deployment_id: deploymentId, instance_id: placement.instanceId, gpu_count: placement.gpuCount })
          .returning('id');
        await trx('deployments')
          .where({ id: deploymentId })
          .update({
            status: 'provisioning',
            cluster_id: placement.clusterId,
            instance_id: placement.instanceId,
            gpu_allocation_id: (allocation as { id: string }).id,
            selected_instance_type: placement.instanceType.name,
            selection_reason: placement.reason,
            engine_model_uid: engineModelUid(deploymentId),
            status_changed_at: trx.fn.now(),
          });
      }
      const placed: PlacedDeployment | undefined = await trx('deployments as d')
        .join('gpu_allocations as a', 'a.id', 'd.gpu_allocation_id')
        .join('instances as i', 'i.id', 'd.instance_id')
        .join('deployable_models as m', 'm.id', 'd.deployable_model_id')
        .where('d.id', deploymentId)
        .first('d.*', 'a.gpu_count', 'i.engine_worker', 'm.model_type');
      return placed;
    });
  }

  async #move(deploymentId: string, from: string, to: string): Promise<boolean> {
    const moved = await this.#db('deployments').where({ id: deploymentId, status: from }).update({ status: to, status_changed_at: this.#db.fn.now() });
    return moved > 0;
  }

  async #soon(queue: string, deploymentId: string, afterSeconds: number): Promise<void> {
    await this.#boss.send(queue, { deploymentId }, { singletonKey: deploymentId, startAfter: new Date(Date.now() + afterSeconds * 1000) });
  }

  /** Whether the engine confirms the deployment's model is gone (`pending` while it is launching). */
  async #stopOnEngine(deployment: DeploymentRow): Promise<'stopped' | 'pending'> {
    if (!deployment.cluster_id || !deployment.engine_model_uid) return 'stopped';
    const client = await this.#clusters.clientOf(deployment.cluster_id);
    return client.stop(deployment.engine_model_uid);
  }
}

async function releaseAllocation(trx: Knex.Transaction, deploymentId: string): Promise<void> {
  await trx('gpu_allocations').where({ deployment_id: deploymentId, status: 'active' }).update({ status: 'released', released_at: trx.fn.now() });
}

/** The provisioning jobs: each step keyed by deployment id (one queued at a time), and the reconciler. */
export function provisioningJobs(provisioner: Provisioner, boss: PgBoss, settings: Config['provisioning']): JobDefinition[] {
  const step = (queue: string, run: (data: DeploymentJob, log: Logger, lastAttempt: boolean) => Promise<void>): JobDefinition<DeploymentJob> => ({
    queue,
    policy: 'short',
    retryLimit: 5,
    retryDelaySeconds: 2,
    concurrency: 8,
    pollingIntervalSeconds: 0.5,
    handle: (data, { log, lastAttempt }) => run(data, log, lastAttempt),
  });
  return [
    step(PROVISION_QUEUE, ({ deploymentId }, log, lastAttempt) => provisioner.provision(deploymentId, log, lastAttempt)),
    step(AWAIT_READY_QUEUE, ({ deploymentId }, log) => provisioner.awaitReady(deploymentId, log)),
    step(TERMINATE_QUEUE, ({ deploymentId, strayLaunch }, log) => provisioner.terminate(deploymentId, log, strayLaunch ?? false)),
    {
      queue: RECONCILE_QUEUE,
      policy: 'short',
      retryLimit: 0,
      pollingIntervalSeconds: Math.min(2, settings.reconcileIntervalSeconds),
      async handle(_data, { log }) {
        try {
          await provisioner.reconcile(log);
        } finally {
          await boss.send(RECONCILE_QUEUE, {}, { singletonKey: 'reconciler', startAfter: new Date(Date.now() + settings.reconcileIntervalSeconds * 1000) });
        }
      },
    } as JobDefinition<object>,
  ] as JobDefinition[];
}

/** Starts the reconciler's chain in a worker process (one queued run at a time across all workers). */
export async function startReconciler(boss: PgBoss): Promise<void> {
  await boss.send(RECONCILE_QUEUE, {}, { singletonKey: 'reconciler' });
}
