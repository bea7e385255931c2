import { performance } from 'node:perf_hooks';
import type { Response } from 'express';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import { LatencySketch } from '../metrics/latency-sketch.ts';
import { deleteInBatches } from '../db/query.ts';
import type { JobDefinition } from '../jobs/queue.ts';
import { pruneMinuteRollups, writeMinuteRollups, type MinuteRollupRow } from '../metrics/request-metrics.repository.ts';

/** How often the minutes are written (and at `stop`). */
const FLUSH_INTERVAL_MS = 60_000;
/** Minutes kept in memory while the database cannot be written; older ones are dropped (metrics, not billing). */
const MAX_PENDING_MINUTES = 30;

/** One minute's figures of one deployment or one API key in this process. */
export class MinuteRollup {
  requests2xx = 0;
  requests4xx = 0;
  requests5xx = 0;
  requests429 = 0;
  readonly latency = new LatencySketch();
  readonly ttft = new LatencySketch();
  tokensIn = 0;
  tokensOut = 0;
  held = 0;
  heldMs = 0;

  /** Counts one answered request. */
  add(answer: AnsweredRequest): void {
    const status = answer.status;
    if (status === 429) this.requests429 += 1;
    else if (status < 400) this.requests2xx += 1;
    else if (status < 500) this.requests4xx += 1;
    else this.requests5xx += 1;
    this.latency.add(answer.latencyMs);
    if (answer.ttftMs >= 0) this.ttft.add(answer.ttftMs);
    this.tokensIn += answer.tokensIn;
    this.tokensOut += answer.tokensOut;
    if (answer.heldMs >= 0) {
      this.held += 1;
      this.heldMs += answer.heldMs;
    }
  }

  /** Adds another rollup of the same minute (a batch kept after a failed write). */
  merge(other: MinuteRollup): void {
    this.requests2xx += other.requests2xx;
    this.requests4xx += other.requests4xx;
    this.requests5xx += other.requests5xx;
    this.requests429 += other.requests429;
    this.latency.merge(other.latency.toJSON());
    this.ttft.merge(other.ttft.toJSON());
    this.tokensIn += other.tokensIn;
    this.tokensOut += other.tokensOut;
    this.held += other.held;
    this.heldMs += other.heldMs;
  }
}

/**
 * An inference request as it ended: its status (499 when the client left before any), its
 * duration from arrival to the answer's end, the time to its first streamed chunk (−1 for an answer
 * that did not stream), tokens metered, and how long a cold start held it (−1 when it was not held).
 */
export interface AnsweredRequest {
  status: number;
  latencyMs: number;
  ttftMs: number;
  tokensIn: number;
  tokensOut: number;
  heldMs: number;
}

/** One minute of this process: the rollups by deployment and by API key. */
interface Minute {
  minute: number;
  deployments: Map<string, MinuteRollup>;
  keys: Map<number, MinuteRollup>;
}

/**
 * Per-deployment and per-key request metrics, aggregated in memory (docs/operating.md, Deployment
 * metrics). The gateway calls `record` once per inference request as its answer closes: a lookup
 * of the minute's rollup and a few additions, with a sketch insert for the latency (and the time
 * to first token of a stream). Once a minute, and at `stop`, every minute held is written in one
 * statement per table, which adds this process's counts to what other processes wrote for the
 * same minute and merges the sketches in SQL (request-metrics.repository.ts): no write per request,
 * one row per deployment (and key) and minute.
 */
export class RequestMetrics {
  readonly #db: Knex;
  readonly #log: Logger;
  #current: Minute = { minute: -1, deployments: new Map(), keys: new Map() };
  /** Minutes past (and minutes whose write failed), waiting for the next flush. */
  #closed: Minute[] = [];
  #timer: NodeJS.Timeout | undefined;
  #flushing: Promise<void> = Promise.resolve();

  constructor(db: Knex, log: Logger) {
    this.#db = db;
    this.#log = log;
  }

  /** Counts an ended request of a deployment (null: a hosted model, or refused before routing) and of an API key (null: a session). */
  record(deploymentId: string | null, apiKeyId: number | null, answer: AnsweredRequest, nowMs = Date.now()): void {
    if (deploymentId === null && apiKeyId === null) return;
    const minute = this.#minuteOf(nowMs);
    if (deploymentId !== null) {
      let rollup = minute.deployments.get(deploymentId);
      if (!rollup) minute.deployments.set(deploymentId, (rollup = new MinuteRollup()));
      rollup.add(answer);
    }
    if (apiKeyId !== null) {
      let rollup = minute.keys.get(apiKeyId);
      if (!rollup) minute.keys.set(apiKeyId, (rollup = new MinuteRollup()));
      rollup.add(answer);
    }
  }

  /** Starts flushing once a minute. */
  start(): void {
    this.#timer ??= setInterval(() => void this.flush(), FLUSH_INTERVAL_MS).unref();
  }

  /** Stops flushing, after a last flush. */
  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    await this.flush();
  }

  /**
   * Writes every minute held, the current one included (a later flush adds the rest of it: the
   * write adds, it never replaces); concurrent calls run one after the other. A write that fails
   * keeps its minutes for the next flush, up to MAX_PENDING_MINUTES.
   */
  flush(): Promise<void> {
    this.#flushing = this.#flushing.then(() => this.#write());
    return this.#flushing;
  }

  async #write(): Promise<void> {
    const minutes = [...this.#closed, this.#current];
    this.#closed = [];
    this.#current = { minute: -1, deployments: new Map(), keys: new Map() };
    const deployments = rowsOf(minutes, 'deployments');
    const keys = rowsOf(minutes, 'keys');
    if (!deployments.length && !keys.length) return;
    try {
      await writeMinuteRollups(this.#db, deployments, keys);
    } catch (error) {
      this.#log.warn({ err: error, minutes: minutes.length }, 'could not write the request metrics; kept for the next flush');
      this.#closed = [...minutes.filter((m) => m.minute >= 0), ...this.#closed].slice(-MAX_PENDING_MINUTES);
    }
  }

  #minuteOf(nowMs: number): Minute {
    const minute = nowMs - (nowMs % 60_000);
    const current = this.#current;
    if (current.minute === minute) return current;
    if (current.minute >= 0) this.#closed.push(current);
    this.#current = { minute, deployments: new Map(), keys: new Map() };
    return this.#current;
  }
}

/**
 * The rows of one table, one per (owner, minute): minutes kept after a failed write may repeat a
 * pair, merged here (one statement may not touch a row twice). Sorted by owner and minute, so that
 * processes writing the same rows lock them in the same order (no deadlock).
 */
function rowsOf<K extends 'deployments' | 'keys'>(minutes: readonly Minute[], kind: K): MinuteRollupRow<Minute[K] extends Map<infer Id, MinuteRollup> ? Id : never>[] {
  type Id = Minute[K] extends Map<infer I, MinuteRollup> ? I : never;
  const byKey = new Map<string, { owner: Id; minute: number; rollup: MinuteRollup }>();
  for (const { minute, [kind]: rollups } of minutes) {
    if (minute < 0) continue;
    for (const [owner, rollup] of rollups as Map<Id, MinuteRollup>) {
      const key = `${String(owner)} ${minute}`;
      const seen = byKey.get(key);
      if (seen) seen.rollup.merge(rollup);
      else byKey.set(key, { owner, minute, rollup });
    }
  }
  return [...byKey.values()]
    .sort((a, b) => (a.owner < b.owner ? -1 : a.owner > b.owner ? 1 : a.minute - b.minute))
    .map(({ owner, minute, rollup }) => ({ owner, minute: new Date(minute), rollup }));
}

/**
 * What the inference path notes on an answer's `res.locals` for its metrics, read once as the
 * answer closes (fields, not a closure per request): the deployment once routing chose it (a
 * refusal after that counts for it too), how long a cold start held it, when its first streamed
 * chunk went out, and the tokens metered. `startedAt` is the request log's (performance.now()).
 */
export interface RequestNote {
  startedAt?: number;
  metricsDeploymentId?: string;
  metricsHeldMs?: number;
  metricsFirstChunkAt?: number;
  metricsTokensIn?: number;
  metricsTokensOut?: number;
}

/** A client that left before any answer was sent (nginx's 499): counted with the 4xx. */
const CLIENT_CLOSED = 499;

/**
 * The one `close` listener the gateway adds to each inference answer (shared: no closure per
 * request): the answer's status and notes, counted in this process's minute of its deployment
 * and of its API key.
 */
export function answerRecorder(metrics: RequestMetrics): (this: Response) => void {
  return function recordAnswer(this: Response) {
    const note = this.locals as RequestNote;
    const principal = this.req.principal;
    const now = performance.now();
    const started = note.startedAt ?? now;
    metrics.record(note.metricsDeploymentId ?? null, principal?.kind === 'apiKey' ? principal.keyId : null, {
      status: this.headersSent ? this.statusCode : CLIENT_CLOSED,
      latencyMs: now - started,
      ttftMs: note.metricsFirstChunkAt === undefined ? -1 : note.metricsFirstChunkAt - started,
      tokensIn: note.metricsTokensIn ?? 0,
      tokensOut: note.metricsTokensOut ?? 0,
      heldMs: note.metricsHeldMs ?? -1,
    });
  };
}

export const PRUNE_REQUEST_METRICS_QUEUE = 'prune-request-metrics';

/** Deletes minute rollups older than METRICS_RETENTION_DAYS, hourly (an hour's minutes at a time, in batches). */
export function pruneRequestMetricsJob(db: Knex): JobDefinition {
  return {
    queue: PRUNE_REQUEST_METRICS_QUEUE,
    schedule: '41 * * * *',
    policy: 'short',
    retryLimit: 2,
    async handle(_data, { log }) {
      let deleted = 0;
      for (const table of ['deployment_metrics_minutes', 'api_key_metrics_minutes'] as const) {
        deleted += await deleteInBatches((limit) => pruneMinuteRollups(db, table, limit));
      }
      if (deleted) log.info({ deleted }, 'request metrics past their retention deleted');
    },
  };
}
