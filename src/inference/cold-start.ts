import type { Knex } from 'knex';
import type { PgBoss } from 'pg-boss';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import { DeploymentRow } from '../db/models/deployments.ts';
import { retryingTransaction } from '../db/transactions.ts';
import { recordScale } from '../deployments/deployment-changes.ts';
import { SERVING } from '../deployments/deployment-states.ts';
import { requestScale, scaleMessage } from '../deployments/scaling.ts';
import { countReady } from '../deployments/scaling.repository.ts';
import { AppError } from '../errors.ts';
import type { DeploymentLoad } from './deployment-load.ts';

/** How often a held request's deployment is looked at when no notification came (one read per deployment, not per request). */
const RECHECK_MS = 1_000;
/** What a caller refused during a cold start is told to wait before trying again. */
const RETRY_AFTER_SECONDS = 5;

/** The deployment is not serving yet: 503 in the inference shape, with `Retry-After` (the official clients retry it). */
export function notServingYet(deploymentId: string, why: string): AppError {
  return new AppError('SERVICE_UNAVAILABLE', `The deployment ${deploymentId} is scaling up and ${why}; retry shortly.`, {
    headers: { 'Retry-After': String(RETRY_AFTER_SECONDS) },
    inference: { code: 'deployment_not_running', param: 'model' },
  });
}

/** The requests held for one deployment in this process: released together when a replica is ready. */
interface Waiter {
  ready: Promise<void>;
  release(): void;
  timer: NodeJS.Timeout;
}

/**
 * The cold start in the gateway: a request for a running deployment with no replica ready (scaled
 * to zero, or every replica being replaced) wakes it, if it is at zero (one guarded update and a
 * scale job: whoever comes first), and is held, with those that follow (at most
 * COLD_START_MAX_HELD_REQUESTS per deployment in this process), until a replica is ready (the
 * replicas' change notification, or a read each second if one was missed) or its timeout:
 * COLD_START_TIMEOUT_SECONDS, shortened by the caller's `X-Scale-Up-Timeout`. Past it, or over the
 * bound, 503 `deployment_not_running` with `Retry-After`. A held request counts as load (the
 * autoscaler sees it), and as a request for the idle time.
 */
export class ColdStarts {
  readonly #db: Knex;
  readonly #boss: PgBoss;
  readonly #load: DeploymentLoad;
  readonly #settings: Config['scaling'];
  readonly #log: Logger;
  readonly #waiters = new Map<string, Waiter>();

  constructor(deps: { db: Knex; boss: PgBoss; load: DeploymentLoad; settings: Config['scaling']; log: Logger }) {
    this.#db = deps.db;
    this.#boss = deps.boss;
    this.#load = deps.load;
    this.#settings = deps.settings;
    this.#log = deps.log;
  }

  /** Holds the request until the deployment has a replica ready (or has left `running`); 503 past the timeout or the bound. */
  async hold(deploymentId: string, scaleUpTimeoutSeconds: number | undefined): Promise<void> {
    if (this.#load.heldFor(deploymentId) >= this.#settings.coldStartMaxHeld) {
      throw notServingYet(deploymentId, `${this.#settings.coldStartMaxHeld} requests already wait for it here`);
    }
    const timeoutSeconds = Math.min(this.#settings.coldStartTimeoutSeconds, scaleUpTimeoutSeconds ?? Number.POSITIVE_INFINITY);
    const release = this.#load.hold(deploymentId);
    let timer: NodeJS.Timeout | undefined;
    try {
      const waiter = this.#waiterFor(deploymentId);
      await this.#wake(deploymentId);
      const timedOut = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), timeoutSeconds * 1000)));
      if ((await Promise.race([waiter.ready, timedOut])) === 'timeout') {
        throw notServingYet(deploymentId, `no replica was ready within ${timeoutSeconds} seconds`);
      }
    } finally {
      clearTimeout(timer);
      release();
    }
  }

  /** A replica of the deployment changed (CHANGE_CHANNELS.replicas): its held requests go if one is ready. */
  replicasChanged(deploymentId: string): void {
    if (this.#waiters.has(deploymentId)) void this.#check(deploymentId);
  }

  /** Notifications may have been missed: every held deployment is looked at. */
  resync(): void {
    for (const deploymentId of this.#waiters.keys()) void this.#check(deploymentId);
  }

  /** Lets every held request go (shutdown): each re-routes and gets the answer its deployment's state gives. */
  releaseAll(): void {
    for (const waiter of this.#waiters.values()) waiter.release();
  }

  #waiterFor(deploymentId: string): Waiter {
    let waiter = this.#waiters.get(deploymentId);
    if (waiter) return waiter;
    let resolve!: () => void;
    const ready = new Promise<void>((r) => (resolve = r));
    const timer = setInterval(() => void this.#check(deploymentId), RECHECK_MS).unref();
    waiter = {
      ready,
      timer,
      release: () => {
        clearInterval(timer);
        if (this.#waiters.get(deploymentId) === waiter) this.#waiters.delete(deploymentId);
        resolve();
      },
    };
    this.#waiters.set(deploymentId, waiter);
    return waiter;
  }

  /** Releases the deployment's held requests if it has a replica ready or no longer runs. */
  async #check(deploymentId: string): Promise<void> {
    try {
      const row = await DeploymentRow.query(this.#db).findById(deploymentId).select('status');
      if (row?.status !== SERVING || (await countReady(this.#db, deploymentId)) > 0) this.#waiters.get(deploymentId)?.release();
    } catch (error) {
      this.#log.warn({ err: error, deployment_id: deploymentId }, 'could not look at a deployment held for a cold start');
    }
  }

  /** A deployment at zero wants one replica again: written once (guarded by its row lock), with its event and scale job. */
  async #wake(deploymentId: string): Promise<void> {
    const woken = await retryingTransaction(this.#db, async (trx) => {
      const row = await DeploymentRow.query(trx).findById(deploymentId).where({ status: SERVING, desired_replicas: 0 }).forUpdate().select('min_replicas');
      if (!row) return false;
      const to = Math.max(row.min_replicas, 1);
      await DeploymentRow.query(trx).findById(deploymentId).patch({ desired_replicas: to });
      const scale = { from: 0, to, reason: 'request' as const };
      await recordScale(trx, deploymentId, { status: SERVING, scale, message: scaleMessage(scale) });
      await requestScale(this.#boss, trx, deploymentId);
      return true;
    });
    if (woken) this.#log.info({ deployment_id: deploymentId }, 'deployment woken from zero by a request');
    // A replica may have become ready before this request was held.
    await this.#check(deploymentId);
  }
}
