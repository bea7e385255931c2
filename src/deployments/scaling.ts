import type { Knex } from 'knex';
import type { PgBoss } from 'pg-boss';
import type { Logger } from 'pino';
import { EngineError, type XinferenceClient } from '../adapters/xinference.ts';
import type { ClustersService } from '../clusters/clusters.service.ts';
import type { Config } from '../config.ts';
import { announceChange, CHANGE_CHANNELS } from '../db/change-listener.ts';
import type { DeploymentScale } from '../db/models/deployment-events.ts';
import type { DeploymentReplicaRow } from '../db/models/deployment-replicas.ts';
import type { DeploymentRow } from '../db/models/deployments.ts';
import { retryingTransaction } from '../db/transactions.ts';
import { chainedJob, enqueue, hurryChain, sendLater, startChain, type JobDefinition } from '../jobs/queue.ts';
import { loadGuardInputs, scaleUpRefusal } from '../billing/deployment-guard.ts';
import { writeReplicaSamples } from '../metrics/request-metrics.repository.ts';
import { recordScale } from './deployment-changes.ts';
import type { EngineLog } from './engine-log.ts';
import { replicaMove, SERVING, type ReplicaEvent } from './deployment-states.ts';
import { findDeployment, findPlacedDeployment, findPlacedReplicas, insertAllocation, insertReplica, lockPlacementCandidates, moveReplicas, toCandidate } from './deployments.repository.ts';
import { requiredGpuMemoryGb, selectPlacement } from './instance-selection.ts';
import { engineModelUid, launchSpecOf, TERMINATE_QUEUE } from './provisioning.ts';
import {
  inFlightByReplica,
  liveReplicas,
  nextOrdinal,
  pruneLoad,
  readScalingStates,
  elasticDeploymentComing,
  rememberScaling,
  shortfallReportedAt,
  writeDesiredReplicas,
  type ScalingState,
} from './scaling.repository.ts';

/** The job that brings a deployment's replicas to its `desired_replicas`. */
export const SCALE_QUEUE = 'scale-deployment';
/** The autoscaler's run: every running deployment's desired replicas from its load (one chain across all workers). */
export const AUTOSCALE_QUEUE = 'autoscale-deployments';

/** Asks for the deployment's replicas to be brought to its desired count, in the caller's transaction (one queued at a time per deployment). */
export async function requestScale(boss: PgBoss, trx: Knex.Transaction, deploymentId: string): Promise<void> {
  await enqueue(boss, trx, SCALE_QUEUE, { deploymentId }, { singletonKey: deploymentId });
}

/**
 * How long a draining replica waits before its in-flight count is trusted: every process drops
 * its routes at the replicas' notification (or when its listener reconnects), so no new request
 * reaches it after a few milliseconds, and reports what it still serves on it within a second.
 * These seconds are billed (the replica holds its GPUs until its model stops).
 */
const DRAIN_SETTLE_SECONDS = 2;
/**
 * How often the autoscaler runs while no deployment is elastic or unsettled (its idle cost): at
 * most this long before it sees a new elastic deployment, which is still being provisioned then.
 */
const QUIET_INTERVAL_SECONDS = 5;
/** How often a starting replica's engine state is read (the cold start waits on it). */
const STARTING_POLL_SECONDS = 0.25;
/** How often draining and stopping replicas are looked at. */
const LEAVING_POLL_SECONDS = 1;
/** After a capacity shortfall or a replica that failed to start, no replica is added for this long. */
const ADD_BACKOFF_SECONDS = 30;

/** Why the desired count changes, with the sentence the event carries. */
export interface ScaleDecision {
  desired: number;
  reason?: DeploymentScale['reason'];
  /** The new value of "fewer replicas wanted since" (undefined: unchanged). */
  fewerWantedSince?: Date | null;
}

/**
 * The autoscaler's rule, pure: the desired replicas of a running deployment from its load (requests
 * in flight and held in every API process). Clamp(⌈load / target⌉, min, max); more at once; fewer
 * only once the load has wanted fewer for the cool-down (hysteresis in time: a load that comes back
 * starts the cool-down anew); zero only with `min_replicas` 0, no request in flight or held, no
 * replica starting, and none received for `scale_to_zero_after_seconds` since a replica last became
 * ready (that idle time is its own cool-down). A
 * deployment at zero with a request held wakes.
 */
export function decideReplicas(state: ScalingState, now: Date, cooldownSeconds: number): ScaleDecision {
  const { desired_replicas: desired, min_replicas: min, max_replicas: max } = state;
  // A replica still starting is a cold start under way: the idle time counts from when it serves.
  const idle = state.load === 0 && state.starting === 0 && state.idle_seconds >= state.scale_to_zero_after_seconds;
  let want = Math.min(max, Math.max(min, Math.ceil(state.load / state.target_concurrency)));
  // With min_replicas 0, one replica stays until the deployment is idle.
  if (want === 0 && desired > 0 && !idle) want = 1;
  if (want > desired) return { desired: want, reason: desired === 0 ? 'request' : 'load', fewerWantedSince: null };
  if (want === desired) return { desired, ...(state.fewer_wanted_since ? { fewerWantedSince: null } : {}) };
  if (want === 0) return { desired: 0, reason: 'idle', fewerWantedSince: null };
  if (!state.fewer_wanted_since) return { desired, fewerWantedSince: now };
  if (now.getTime() - state.fewer_wanted_since.getTime() < cooldownSeconds * 1000) return { desired };
  return { desired: want, reason: 'load', fewerWantedSince: null };
}

/** How stale the remembered last request of a deployment that cannot go to zero may be (it matters if its `min_replicas` becomes 0). */
const REMEMBER_EVERY_SECONDS = 30;

/**
 * The last request to remember for the idle time, if it should be written now: at once for a
 * deployment that may go to zero, else at most every REMEMBER_EVERY_SECONDS (a busy fixed
 * deployment is not written every second).
 */
export function requestToRemember(state: Pick<ScalingState, 'min_replicas' | 'reported_request_at' | 'remembered_request_at'>): Date | undefined {
  const reported = state.reported_request_at;
  if (!reported || (state.remembered_request_at && reported <= state.remembered_request_at)) return undefined;
  if (state.min_replicas === 0 || !state.remembered_request_at) return reported;
  return reported.getTime() - state.remembered_request_at.getTime() >= REMEMBER_EVERY_SECONDS * 1000 ? reported : undefined;
}

/** The sentence of a `deployment.scaled` event. */
export function scaleMessage(scale: DeploymentScale, detail: { load?: number; target?: number } = {}): string {
  const counts = `from ${scale.from} to ${scale.to} ${scale.to === 1 ? 'replica' : 'replicas'}`;
  switch (scale.reason) {
    case 'load':
      return `Scaled ${counts}: ${detail.load ?? 0} ${detail.load === 1 ? 'request' : 'requests'} in flight for a target of ${detail.target ?? 0} per replica.`;
    case 'idle':
      return `Scaled ${counts}: no request came for the idle time; the next request wakes it (a cold start).`;
    case 'request':
      return `Scaled ${counts}: woken by a request.`;
    case 'settings':
      return `Scaled ${counts}: the scaling settings changed.`;
    case 'capacity_shortfall':
      return `Wanted ${scale.to} ${scale.to === 1 ? 'replica' : 'replicas'} (${scale.from} serving or starting): the cluster has no free GPUs for another; the autoscaler tries again as GPUs free up.`;
    case 'spending_limit':
      return `Wanted ${scale.to} ${scale.to === 1 ? 'replica' : 'replicas'} (${scale.from} serving or starting): no replica is added while the organization's spending limit is reached.`;
    case 'replica_failed':
      return `A replica failed to serve and was replaced (${scale.to} wanted).`;
  }
}

/** The start of the minute `at` is in. */
function minuteOf(at: Date): Date {
  return new Date(at.getTime() - (at.getTime() % 60_000));
}

/**
 * Replicas on load and scale to zero (docs/decisions/2026-11-29-elastic-deployments.md). The
 * autoscaler (`decide`, every AUTOSCALER_INTERVAL_SECONDS in one worker) writes each running
 * deployment's desired replicas; the scale job (`scale`, per deployment) brings its replicas there:
 * it books GPUs for a new replica on the deployment's cluster and instance type and launches it,
 * watches it until it serves, drains a replica it takes out (no new request is routed to it, those
 * it serves finish, then its model is stopped and its GPUs freed), and cleans up replicas that
 * failed. Every change of the desired count is a `deployment.scaled` event and webhook. Lock order
 * as provisioning's: the deployment's row, its replicas, the ledger.
 */
export class Scaler {
  readonly #db: Knex;
  readonly #boss: PgBoss;
  readonly #clusters: ClustersService;
  readonly #provisioning: Config['provisioning'];
  readonly #scaling: Config['scaling'];
  /** The minute whose replicas this worker last sampled (ms). */
  #sampledMinute = 0;
  /** What brings the engine's events of a replica that failed into the deployment's event log. */
  readonly #engineLog: EngineLog | undefined;

  constructor(deps: { db: Knex; boss: PgBoss; clusters: ClustersService; provisioning: Config['provisioning']; scaling: Config['scaling']; engineLog?: EngineLog }) {
    this.#db = deps.db;
    this.#engineLog = deps.engineLog;
    this.#boss = deps.boss;
    this.#clusters = deps.clusters;
    this.#provisioning = deps.provisioning;
    this.#scaling = deps.scaling;
  }

  /**
   * The autoscaler's run: each running deployment it may have to act on gets its desired count,
   * and a scale job when its replicas differ from it. Returns when to run next: every
   * AUTOSCALER_INTERVAL_SECONDS while some running deployment is elastic or unsettled, or an
   * elastic one is on its way to running; else after QUIET_INTERVAL_SECONDS (fixed deployments
   * need no autoscaler: their changes queue their own scale job), so that a platform of fixed
   * deployments does not pay a run a second.
   */
  async decide(log: Logger): Promise<number> {
    const now = new Date();
    const minute = minuteOf(now);
    if (minute.getTime() !== this.#sampledMinute) {
      await this.sampleReplicas(minute);
      await pruneLoad(this.#db);
    }
    const states = await readScalingStates(this.#db);
    for (const state of states) {
      const decision = decideReplicas(state, now, this.#scaling.scaleDownCooldownSeconds);
      const lastRequestAt = requestToRemember(state);
      if (decision.fewerWantedSince !== undefined || lastRequestAt) {
        await rememberScaling(this.#db, state.id, { lastRequestAt, fewerWantedSince: decision.fewerWantedSince });
      }
      if (decision.reason && decision.desired !== state.desired_replicas) {
        const scale: DeploymentScale = { from: state.desired_replicas, to: decision.desired, reason: decision.reason };
        const changed = await retryingTransaction(this.#db, async (trx) => {
          if (!(await writeDesiredReplicas(trx, state.id, decision.desired))) return false;
          return recordScale(trx, state.id, { status: SERVING, scale, message: scaleMessage(scale, { load: state.load, target: state.target_concurrency }) });
        });
        if (changed) log.info({ deployment_id: state.id, ...scale, load: state.load }, 'deployment scaled');
      }
      const settled = decision.desired === state.ready + state.starting && state.starting === 0 && state.leaving === 0;
      if (!settled) await this.#boss.send(SCALE_QUEUE, { deploymentId: state.id }, { singletonKey: state.id });
    }
    const busy = states.length > 0 || (await elasticDeploymentComing(this.#db));
    return busy ? this.#scaling.intervalSeconds : Math.max(QUIET_INTERVAL_SECONDS, this.#scaling.intervalSeconds);
  }

  /**
   * Writes every running deployment's replicas (desired, ready) for the minute: the deployment
   * metrics' replica series. The autoscaler's first run of each minute does it (one read, one
   * statement); a second sample of a minute replaces the first.
   */
  async sampleReplicas(minute = minuteOf(new Date())): Promise<void> {
    const taken = (await readScalingStates(this.#db, 'all')).map((state) => ({ deploymentId: state.id, desired: state.desired_replicas, ready: state.ready }));
    await writeReplicaSamples(this.#db, minute, taken);
    this.#sampledMinute = minute.getTime();
  }

  /** Brings the deployment's replicas towards its desired count, one step; runs again soon while replicas start or leave. */
  async scale(deploymentId: string, log: Logger): Promise<void> {
    const deployment = await findDeployment(this.#db, deploymentId);
    if (!deployment || deployment.status !== SERVING || !deployment.cluster_id) return;
    const client = await this.#clusters.clientOf(deployment.cluster_id);
    const added = await retryingTransaction(this.#db, (trx) => this.#resize(trx, deploymentId, log));
    await this.#launch(client, deploymentId, added, log);
    const replicas = await liveReplicas(this.#db, deploymentId);
    const starting = replicas.filter((replica) => replica.status === 'starting');
    for (const replica of starting) await this.#watchStart(client, deployment, replica, log);
    const leaving = replicas.filter((replica) => replica.status !== 'starting' && replica.status !== 'ready');
    if (leaving.length) await this.#stopLeaving(client, deploymentId, leaving, log);
    const after = await liveReplicas(this.#db, deploymentId);
    const pending = after.some((replica) => replica.status === 'starting') ? STARTING_POLL_SECONDS : after.some((replica) => replica.status !== 'ready') ? LEAVING_POLL_SECONDS : 0;
    if (pending) await sendLater(this.#boss, SCALE_QUEUE, { deploymentId }, { singletonKey: deploymentId, afterSeconds: pending });
  }

  /**
   * Under the deployment's lock: replicas added (GPUs booked, rows written `starting`) up to the
   * desired count, or the extra ones taken out (those still starting stopped, then the ready ones
   * serving the fewest requests drained). Returns the replicas to launch.
   */
  async #resize(trx: Knex.Transaction, deploymentId: string, log: Logger): Promise<DeploymentReplicaRow[]> {
    const deployment = await findDeployment(trx, deploymentId, { forUpdate: true });
    if (!deployment || deployment.status !== SERVING) return [];
    const live = await liveReplicas(trx, deploymentId);
    const serving = live.filter((replica) => replica.status === 'starting' || replica.status === 'ready');
    const wanted = deployment.desired_replicas;
    if (serving.length > wanted) {
      await this.#takeOut(trx, deployment, serving, serving.length - wanted);
      return [];
    }
    if (serving.length === wanted) return [];
    const reported = await shortfallReportedAt(trx, deploymentId);
    if (reported && Date.now() - reported.getTime() < ADD_BACKOFF_SECONDS * 1000) return [];
    const refusal = scaleUpRefusal(await loadGuardInputs(trx, deployment.organization_id));
    if (refusal) {
      const scale: DeploymentScale = { from: serving.length, to: wanted, reason: 'spending_limit' };
      await recordScale(trx, deploymentId, { status: SERVING, scale, message: `${scaleMessage(scale)} ${refusal.detail}` });
      await rememberScaling(trx, deploymentId, { shortfallReportedAt: new Date() });
      return [];
    }
    const added: DeploymentReplicaRow[] = [];
    for (let count = serving.length; count < wanted; count++) {
      const replica = await this.#book(trx, deployment);
      if (!replica) {
        const scale: DeploymentScale = { from: serving.length + added.length, to: wanted, reason: 'capacity_shortfall' };
        await recordScale(trx, deploymentId, { status: SERVING, scale, message: scaleMessage(scale) });
        await rememberScaling(trx, deploymentId, { shortfallReportedAt: new Date() });
        log.warn({ deployment_id: deploymentId, ...scale }, 'no capacity for another replica');
        break;
      }
      added.push(replica);
    }
    if (added.length && reported) await rememberScaling(trx, deploymentId, { shortfallReportedAt: null });
    return added;
  }

  /**
   * GPUs for one more replica, on the deployment's cluster and instance type (its replicas are
   * alike), booked in the ledger, and the replica's row; undefined when no instance has room.
   */
  async #book(trx: Knex.Transaction, deployment: DeploymentRow): Promise<DeploymentReplicaRow | undefined> {
    const candidates = (await lockPlacementCandidates(trx))
      .map(toCandidate)
      .filter((candidate) => candidate.clusterId === deployment.cluster_id && candidate.instanceType.name === deployment.selected_instance_type);
    const selection = selectPlacement(candidates, requiredGpuMemoryGb(Number(deployment.model_size_in_billions), deployment.quantization));
    if (!selection.ok) return undefined;
    const { placement } = selection;
    const allocationId = await insertAllocation(trx, { deployment_id: deployment.id, instance_id: placement.instanceId, gpu_count: placement.gpuCount });
    const ordinal = await nextOrdinal(trx, deployment.id);
    const replica = {
      deployment_id: deployment.id,
      organization_id: deployment.organization_id,
      ordinal,
      engine_model_uid: engineModelUid(deployment.id, ordinal),
      gpu_allocation_id: allocationId,
    };
    await insertReplica(trx, replica);
    return (await liveReplicas(trx, deployment.id)).find((row) => row.ordinal === ordinal);
  }

  /** Takes `count` replicas out: those still starting first (stopped: they serve nothing), then the ready ones serving the fewest requests (drained). */
  async #takeOut(trx: Knex.Transaction, deployment: DeploymentRow, serving: readonly DeploymentReplicaRow[], count: number): Promise<void> {
    const load = await inFlightByReplica(trx, deployment.id);
    const order = [...serving].sort(
      (a, b) => Number(a.status === 'ready') - Number(b.status === 'ready') || (load.get(a.id) ?? 0) - (load.get(b.id) ?? 0) || b.ordinal - a.ordinal,
    );
    const out = order.slice(0, count);
    const starting = out.filter((replica) => replica.status === 'starting').map((replica) => replica.id);
    const ready = out.filter((replica) => replica.status === 'ready').map((replica) => replica.id);
    if (starting.length) await moveReplicas(trx, deployment.id, replicaMove('stop'), starting);
    if (ready.length) await moveReplicas(trx, deployment.id, replicaMove('drain'), ready);
    await announceChange(trx, CHANGE_CHANNELS.replicas, deployment.id);
  }

  /** Launches the new replicas on the engine (it answers at once; `#watchStart` follows the load). A launch the engine refuses fails its replica. */
  async #launch(client: XinferenceClient, deploymentId: string, replicas: readonly DeploymentReplicaRow[], log: Logger): Promise<void> {
    if (!replicas.length) return;
    const deployment = await findPlacedDeployment(this.#db, deploymentId);
    if (!deployment) return;
    const placed = await findPlacedReplicas(this.#db, deploymentId, 'starting');
    for (const replica of replicas) {
      const spec = placed.find((row) => row.id === replica.id);
      if (!spec) continue;
      try {
        await client.launch(launchSpecOf(deployment, spec));
        log.info({ deployment_id: deploymentId, replica: replica.ordinal }, 'replica launched');
      } catch (error) {
        if (!(error instanceof EngineError)) throw error;
        await this.#replicaFailed(client, deploymentId, replica, `The engine refused to launch a replica: ${error.message}`, log);
        continue;
      }
      // Deleted meanwhile: the deployment's cleanup may have run before the model arrived.
      const still = (await liveReplicas(this.#db, deploymentId)).find((row) => row.id === replica.id);
      if (still?.status !== 'starting') await this.#boss.send(TERMINATE_QUEUE, { deploymentId, strayLaunch: true }, { singletonKey: `${deploymentId}:stray` });
    }
  }

  /** A starting replica's model on the engine: ready → it serves (metered from now; every router told); failed, lost or too slow → replaced. */
  async #watchStart(client: XinferenceClient, deployment: DeploymentRow, replica: DeploymentReplicaRow, log: Logger): Promise<void> {
    const state = await client.state(replica.engine_model_uid);
    if (state.state === 'ready') {
      const moved = await retryingTransaction(this.#db, async (trx) => {
        const locked = await findDeployment(trx, deployment.id, { forUpdate: true });
        if (locked?.status !== SERVING) return 0;
        const count = await moveReplicas(trx, deployment.id, replicaMove('ready'), [replica.id]);
        if (count) await announceChange(trx, CHANGE_CHANNELS.replicas, deployment.id);
        return count;
      });
      if (moved) log.info({ deployment_id: deployment.id, replica: replica.ordinal }, 'replica ready');
      return;
    }
    const loadingFor = (Date.now() - replica.created_at.getTime()) / 1000;
    if (state.state === 'loading' && loadingFor <= this.#provisioning.startTimeoutSeconds) return;
    const reason =
      state.state === 'error' ? state.message : state.state === 'missing' ? 'The engine no longer knows the replica it was loading.' : `The replica was not ready after ${Math.round(loadingFor)} seconds.`;
    await this.#replicaFailed(client, deployment.id, replica, reason, log);
  }

  /** A ready replica the engine lost or failed, in a deployment that still serves through others (the reconciler found it): replaced. */
  async replicaLost(deploymentId: string, replicaId: string, reason: string, log: Logger): Promise<void> {
    const deployment = await findDeployment(this.#db, deploymentId);
    const replica = (await liveReplicas(this.#db, deploymentId)).find((row) => row.id === replicaId);
    if (!deployment?.cluster_id || !replica) return;
    // Replaced at once: it served, so its launch is not what fails.
    await this.#replicaFailed(await this.#clusters.clientOf(deployment.cluster_id), deploymentId, replica, reason, log, { backOff: false });
    await this.#boss.send(SCALE_QUEUE, { deploymentId }, { singletonKey: deploymentId });
  }

  /**
   * A replica that failed: its model stopped (its GPUs freed once the engine confirms), an event,
   * and, for one that failed to start, no new replica for ADD_BACKOFF_SECONDS (no launch loop).
   */
  async #replicaFailed(client: XinferenceClient, deploymentId: string, replica: DeploymentReplicaRow, reason: string, log: Logger, options = { backOff: true }): Promise<void> {
    const stopped = (await client.stop(replica.engine_model_uid).catch(() => 'pending' as const)) === 'stopped';
    // The engine's account of the replica's failure goes before the scale action that replaces it.
    await this.#engineLog?.import(deploymentId, log, [replica.id]);
    await retryingTransaction(this.#db, async (trx) => {
      const locked = await findDeployment(trx, deploymentId, { forUpdate: true });
      if (!locked) return;
      const event: ReplicaEvent = stopped ? 'stopped' : 'fail';
      if (!(await moveReplicas(trx, deploymentId, replicaMove(event), [replica.id]))) return;
      if (locked.status !== SERVING) return;
      const scale: DeploymentScale = { from: locked.desired_replicas, to: locked.desired_replicas, reason: 'replica_failed' };
      await recordScale(trx, deploymentId, { status: SERVING, scale, message: `${scaleMessage(scale)} ${reason}`.slice(0, 1000) });
      if (options.backOff) await rememberScaling(trx, deploymentId, { shortfallReportedAt: new Date() });
    });
    log.warn({ deployment_id: deploymentId, replica: replica.ordinal, reason }, 'replica failed');
  }

  /**
   * Replicas on their way out: a draining one is stopped once no process has a request in flight on
   * it (after DRAIN_SETTLE_SECONDS) or at the drain timeout; stopping and failed ones are stopped.
   * A replica whose model the engine confirms gone is `stopped`, its GPUs released.
   */
  async #stopLeaving(client: XinferenceClient, deploymentId: string, leaving: readonly DeploymentReplicaRow[], log: Logger): Promise<void> {
    const load = await inFlightByReplica(this.#db, deploymentId);
    const now = Date.now();
    for (const replica of leaving) {
      if (replica.status === 'draining') {
        const drainingFor = (now - (replica.draining_since ?? replica.created_at).getTime()) / 1000;
        const busy = drainingFor < DRAIN_SETTLE_SECONDS || (load.get(replica.id) ?? 0) > 0;
        if (busy && drainingFor < this.#scaling.drainTimeoutSeconds) continue;
      }
      if ((await client.stop(replica.engine_model_uid)) !== 'stopped') continue;
      await retryingTransaction(this.#db, async (trx) => {
        await findDeployment(trx, deploymentId, { forUpdate: true });
        await moveReplicas(trx, deploymentId, replicaMove('stopped'), [replica.id]);
      });
      log.info({ deployment_id: deploymentId, replica: replica.ordinal }, 'replica stopped');
    }
  }
}

/** The scaling jobs: the scale step keyed by deployment (one queued at a time), and the autoscaler's chain. */
export function scalingJobs(scaler: Scaler, boss: PgBoss, settings: Config['scaling']): JobDefinition[] {
  return [
    {
      queue: SCALE_QUEUE,
      policy: 'short',
      retryLimit: 5,
      retryDelaySeconds: 1,
      concurrency: 8,
      handle: ({ deploymentId }, { log }) => scaler.scale(deploymentId, log),
    } as JobDefinition<{ deploymentId: string }>,
    chainedJob(boss, { ...AUTOSCALER, intervalSeconds: settings.intervalSeconds }, (log) => scaler.decide(log)),
  ] as JobDefinition[];
}

/** The autoscaler's chain: one queued run at a time across all workers. */
const AUTOSCALER = { queue: AUTOSCALE_QUEUE, key: 'autoscaler' };

/**
 * Has the autoscaler run now: a deployment just became elastic (created or changed so), and the
 * autoscaler may be in its quiet interval. Whatever fails here only delays it to its next run.
 */
export async function wakeAutoscaler(boss: PgBoss, settings: Pick<DeploymentRow, 'min_replicas' | 'max_replicas'>, log: Logger): Promise<void> {
  if (settings.min_replicas !== 0 && settings.min_replicas === settings.max_replicas) return;
  await hurryChain(boss, AUTOSCALER).catch((error: unknown) => log.warn({ err: error }, 'could not wake the autoscaler'));
}

/** Starts the autoscaler's chain in a worker process. */
export async function startAutoscaler(boss: PgBoss): Promise<void> {
  await startChain(boss, AUTOSCALER);
}
