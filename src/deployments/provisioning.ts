import type { Knex } from 'knex';
import type { PgBoss } from 'pg-boss';
import type { Logger } from 'pino';
import { EngineError } from '../adapters/xinference.ts';
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

interface DeploymentJob {
  deploymentId: string;
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
    const client = await this.#clusters.clientOf(placed.cluster_id as string);
    try {
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
      if (error.kind === 'unavailable' && !lastAttempt) throw error;
      const stage: FailureStage = error.kind === 'unavailable' ? 'instance_provisioning' : error.kind === 'capacity' ? 'capacity' : 'model_launch';
      await this.fail(deploymentId, stage, `The engine refused to launch the model: ${error.message}`, log);
      return;
    }
    const moved = await this.#move(deploymentId, 'provisioning', 'starting');
    if (moved) await this.#checkReadinessSoon(deploymentId, 0);
  }

  /** starting → running when the engine reports the model ready; failed when it reports an error. */
  async awaitReady(deploymentId: string, log: Logger): Promise<void> {
    const deployment: DeploymentRow | undefined = await this.#db('deployments').where({ id: deploymentId }).first();
    if (deployment?.status !== 'starting' || !deployment.cluster_id || !deployment.engine_model_uid) return;
    const client = await this.#clusters.clientOf(deployment.cluster_id);
    const state = await client.state(deployment.engine_model_uid);
    if (state.state === 'ready') {
      if (await this.#move(deploymentId, 'starting', 'running')) log.info({ deployment_id: deploymentId }, 'deployment running');
      return;
    }
    if (state.state === 'error') return this.fail(deploymentId, 'model_launch', state.message, log);
    if (state.state === 'missing') return this.fail(deploymentId, 'model_launch', 'The engine no longer knows the model it was loading.', log);
    const loadingFor = (Date.now() - deployment.status_changed_at.getTime()) / 1000;
    if (loadingFor > this.#settings.startTimeoutSeconds) {
      return this.fail(deploymentId, 'health_check', `The model was not ready after ${Math.round(loadingFor)} seconds.`, log);
    }
    await this.#checkReadinessSoon(deploymentId, this.#settings.readinessPollSeconds);
  }

  /** terminating → terminated: the model stopped on the engine, its GPUs released. */
  async terminate(deploymentId: string, log: Logger): Promise<void> {
    const deployment: DeploymentRow | undefined = await this.#db('deployments').where({ id: deploymentId }).first();
    if (deployment?.status !== 'terminating') return;
    await this.#stopOnEngine(deployment);
    await this.#db.transaction(async (trx) => {
      const locked = await trx('deployments').where({ id: deploymentId, status: 'terminating' }).forUpdate().first('id');
      if (!locked) return;
      await releaseAllocation(trx, deploymentId);
      await trx('deployments')
        .where({ id: deploymentId })
        .update({ status: 'terminated', terminated_at: trx.fn.now(), status_changed_at: trx.fn.now() });
    });
    log.info({ deployment_id: deploymentId }, 'deployment terminated');
  }

  /** Any non-terminal state → failed, with its GPUs released and the model stopped on the engine. */
  async fail(deploymentId: string, stage: FailureStage, reason: string, log: Logger): Promise<void> {
    const deployment: DeploymentRow | undefined = await this.#db('deployments').where({ id: deploymentId }).first();
    if (!deployment || !['requested', 'provisioning', 'starting', 'running'].includes(deployment.status)) return;
    await this.#stopOnEngine(deployment).catch((error: unknown) => log.warn({ deployment_id: deploymentId, err: String(error) }, 'could not stop the model'));
    await this.#db.transaction(async (trx) => {
      const locked = await trx('deployments').where({ id: deploymentId }).whereIn('status', ['requested', 'provisioning', 'starting', 'running']).forUpdate().first('id');
      if (!locked) return;
      await releaseAllocation(trx, deploymentId);
      await trx('deployments')
        .where({ id: deploymentId })
        .update({ status: 'failed', failure_stage: stage, failure_reason: reason.slice(0, 1000), status_changed_at: trx.fn.now() });
    });
    log.warn({ deployment_id: deploymentId, failure_stage: stage }, 'deployment failed');
  }

  /** Resumes steps left behind, and fails running deployments whose engine lost the model. */
  async reconcile(log: Logger): Promise<void> {
    const stuckBefore = new Date(Date.now() - this.#settings.stuckAfterSeconds * 1000);
    const stuck: Array<{ id: string; status: string }> = await this.#db('deployments')
      .whereIn('status', ['requested', 'provisioning', 'starting', 'terminating'])
      .where('status_changed_at', '<=', stuckBefore)
      .select('id', 'status');
    for (const { id, status } of stuck) {
      const queue = status === 'terminating' ? TERMINATE_QUEUE : status === 'starting' ? AWAIT_READY_QUEUE : PROVISION_QUEUE;
      await this.#boss.send(queue, { deploymentId: id }, { singletonKey: id });
    }
    if (stuck.length) log.info({ resumed: stuck.length }, 'reconciler resumed deployments');

    const running: DeploymentRow[] = await this.#db('deployments').where({ status: 'running' }).whereNotNull('cluster_id');
    for (const deployment of running) {
      try {
        const client = await this.#clusters.clientOf(deployment.cluster_id as string);
        const state = await client.state(deployment.engine_model_uid as string);
        if (state.state === 'missing' || state.state === 'error') {
          const detail = state.state === 'error' ? `: ${state.message}` : '';
          await this.fail(deployment.id, 'health_check', `The engine no longer serves the model${detail}.`, log);
        }
      } catch (error) {
        log.warn({ deployment_id: deployment.id, err: String(error) }, 'could not check a running deployment');
      }
    }
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

  async #checkReadinessSoon(deploymentId: string, afterSeconds: number): Promise<void> {
    await this.#boss.send(AWAIT_READY_QUEUE, { deploymentId }, { singletonKey: deploymentId, startAfter: new Date(Date.now() + afterSeconds * 1000) });
  }

  async #stopOnEngine(deployment: DeploymentRow): Promise<void> {
    if (!deployment.cluster_id || !deployment.engine_model_uid) return;
    const client = await this.#clusters.clientOf(deployment.cluster_id);
    await client.terminate(deployment.engine_model_uid);
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
    step(TERMINATE_QUEUE, ({ deploymentId }, log) => provisioner.terminate(deploymentId, log)),
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
