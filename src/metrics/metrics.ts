import type { Knex } from 'knex';
import type { PgBoss } from 'pg-boss';
import type { Logger } from 'pino';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { ACTIVE_STATUSES } from '../deployments/deployment-states.ts';
import type { JobMetrics, JobOutcome } from '../jobs/queue.ts';
import { countActiveDeploymentsByStatus } from './metrics.repository.ts';
import { RequestHistogram, type HistogramSeries } from './request-histogram.ts';

/** Seconds: from a few milliseconds (a cached read) to the minutes a long chat stream may last. */
const REQUEST_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
/** Seconds: an engine's first byte (prefill and queueing included) or a background job. */
const ENGINE_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
/** Seconds: a usage batch insert or a webhook attempt (its timeout is at most 60 s). */
const SHORT_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** How long a value read from Postgres at a scrape serves the next scrapes (several Prometheus servers, a scrape storm). */
const SNAPSHOT_MAX_AGE_MS = 5_000;

/** How often the event loop's delay is sampled (prom-client's `nodejs_eventloop_lag_*` percentiles). */
const EVENT_LOOP_SAMPLE_MS = 100;

/** `operation_id` of a request that matched no operation of the document (a 404, a 405, the docs' assets). */
export const UNMATCHED = 'unmatched';
/** `status` of a request whose client left before any answer was sent (nginx's convention). */
export const CLIENT_CLOSED = 499;

/** A usage batch: written; kept in memory because the database is unreachable (retried); refused, then written one by one. */
export type UsageFlushOutcome = 'written' | 'deferred' | 'refused';
/** A webhook attempt: delivered; failed and retried; failed on the delivery's last attempt; not sent (endpoint disabled meanwhile). */
export type WebhookOutcome = 'succeeded' | 'retrying' | 'failed' | 'abandoned';
/** An email: accepted by the SMTP server; refused and retried; refused on its last attempt. */
export type EmailOutcome = 'sent' | 'retrying' | 'failed';

/** The measures of one inference route's relays, bound to its labels once. */
export interface RelayMetrics {
  /** A relay started (its request is being sent to the engine). */
  opened(): void;
  /** It ended, whatever its outcome. */
  closed(): void;
  /** From sending the request to the engine's answer headers. */
  upstreamLatency(seconds: number): void;
  /** From sending the request to the first chunk of the answer's body. */
  firstChunk(seconds: number): void;
}

/**
 * The service's Prometheus metrics, one registry per container so that several services in one
 * process (tests) never share a series. Made only when METRICS_PORT is set; code that records takes
 * it as optional. On the request path a measure is one map lookup and one bucket search (series
 * bound once per label set); what lives in Postgres is read at scrape time and kept 5 s. Costs and
 * the metrics: docs/operating.md, Metrics.
 */
export class Metrics implements JobMetrics {
  readonly registry = new Registry();
  readonly #log: Logger;

  readonly #httpDuration: RequestHistogram<'operation_id' | 'status'>;
  /** operationId → status → series. */
  readonly #httpChildren = new Map<string, Map<number, HistogramSeries>>();

  readonly #upstreamLatency: RequestHistogram<'route'>;
  readonly #firstChunk: RequestHistogram<'route'>;
  readonly #relays = new Map<string, RelayMetrics>();
  /** route → relays in progress. */
  readonly #activeStreams = new Map<string, number>();

  /** Bound once: a flush may follow every answer delivered in full (the group commit). */
  readonly #usageFlushes: Record<UsageFlushOutcome, Counter.Internal>;
  readonly #usageRecords: Record<'written' | 'refused', Counter.Internal>;
  readonly #usageFlushDuration: Histogram;
  #usageWaiting: () => number = () => 0;

  readonly #jobRuns: Counter<'queue' | 'outcome'>;
  readonly #jobDuration: Histogram<'queue'>;
  readonly #webhookAttempts: Counter<'outcome'>;
  readonly #webhookDuration: Histogram;
  readonly #emails: Counter<'template' | 'outcome'>;

  #queues: Snapshot<Array<{ name: string; ready: number; deferred: number; active: number; failed: number }>> | undefined;
  #deployments: Snapshot<Map<string, number>> | undefined;

  constructor(log: Logger) {
    this.#log = log;
    const registers = [this.registry];
    // The event-loop delay is sampled every 100 ms, not prom-client's 10 ms: each sample wakes the
    // process, and at 10 ms that cost about 5 ms of CPU a second idle on a 2-core VM (0.5 at 100 ms),
    // half the idle budget (DESIGN.md §4); 150 samples between two scrapes 15 s apart are plenty.
    collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });

    this.#httpDuration = new RequestHistogram({
      name: 'mds_http_request_duration_seconds',
      help: `HTTP requests of the API by operationId (${UNMATCHED} when none matched) and status (${CLIENT_CLOSED}: the client left before an answer): time to the answer's end.`,
      labelNames: ['operation_id', 'status'],
      buckets: REQUEST_BUCKETS,
      registers,
    });

    this.#upstreamLatency = new RequestHistogram({
      name: 'mds_inference_upstream_latency_seconds',
      help: "Inference relays by engine route: from sending the request to the engine's answer headers.",
      labelNames: ['route'],
      buckets: ENGINE_BUCKETS,
      registers,
    });
    this.#firstChunk = new RequestHistogram({
      name: 'mds_inference_time_to_first_chunk_seconds',
      help: "Inference relays by engine route: from sending the request to the first chunk of the engine's answer body.",
      labelNames: ['route'],
      buckets: ENGINE_BUCKETS,
      registers,
    });
    const activeStreams = this.#activeStreams;
    new Gauge({
      name: 'mds_inference_active_streams',
      help: 'Inference relays in progress by engine route: each holds a connection to an engine, from the request sent to the end of the answer.',
      labelNames: ['route'],
      registers,
      collect() {
        for (const [route, open] of activeStreams) this.set({ route }, open);
      },
    });

    const usageFlushes = new Counter({
      name: 'mds_usage_flushes_total',
      help: 'Batches of usage records written to Postgres by outcome: written; deferred (the database unreachable, kept for the next flush); refused (then written one by one).',
      labelNames: ['outcome'],
      registers,
    });
    this.#usageFlushes = { written: usageFlushes.labels('written'), deferred: usageFlushes.labels('deferred'), refused: usageFlushes.labels('refused') };
    const usageRecords = new Counter({
      name: 'mds_usage_records_total',
      help: 'Usage records by outcome: written; refused by the database (lost, logged).',
      labelNames: ['outcome'],
      registers,
    });
    this.#usageRecords = { written: usageRecords.labels('written'), refused: usageRecords.labels('refused') };
    this.#usageFlushDuration = new Histogram({
      name: 'mds_usage_flush_duration_seconds',
      help: 'Time of one batch insert of usage records.',
      buckets: SHORT_BUCKETS,
      registers,
    });
    const waiting = () => this.#usageWaiting();
    new Gauge({
      name: 'mds_usage_records_waiting',
      help: 'Usage records in memory, not written yet (a growing number: the database is unreachable).',
      registers,
      collect() {
        this.set(waiting());
      },
    });

    this.#jobRuns = new Counter({
      name: 'mds_job_runs_total',
      help: 'Runs of background jobs in this process by queue and outcome: completed; retrying (failed, pg-boss retries it); failed (on its last attempt).',
      labelNames: ['queue', 'outcome'],
      registers,
    });
    this.#jobDuration = new Histogram({
      name: 'mds_job_duration_seconds',
      help: 'Time of one run of a background job by queue.',
      labelNames: ['queue'],
      buckets: ENGINE_BUCKETS,
      registers,
    });
    const queueJobs: Gauge<'queue' | 'state'> = new Gauge({
      name: 'mds_job_queue_jobs',
      help: "Jobs of each pg-boss queue by state (ready: due and waiting for a worker; deferred: due later; active; failed: kept after failing), as pg-boss's supervisor last counted them (every 60 s).",
      labelNames: ['queue', 'state'],
      registers,
      collect: () => this.#collectQueues(queueJobs),
    });
    const deployments: Gauge<'status'> = new Gauge({
      name: 'mds_deployments',
      help: `Deployments by status, of the statuses that hold or may soon hold resources (${ACTIVE_STATUSES.join(', ')}).`,
      labelNames: ['status'],
      registers,
      collect: () => this.#collectDeployments(deployments),
    });

    this.#webhookAttempts = new Counter({
      name: 'mds_webhook_attempts_total',
      help: 'Webhook delivery attempts by outcome: succeeded; retrying (failed, another attempt follows); failed (the delivery failed for good); abandoned (the endpoint was disabled before it went out).',
      labelNames: ['outcome'],
      registers,
    });
    this.#webhookDuration = new Histogram({
      name: 'mds_webhook_attempt_duration_seconds',
      help: 'Time of one webhook delivery attempt, to the receiver’s answer or the failure.',
      buckets: SHORT_BUCKETS,
      registers,
    });
    this.#emails = new Counter({
      name: 'mds_emails_total',
      help: 'Email send attempts by template and outcome: sent (the SMTP server accepted it); retrying (refused, retried later); failed (refused on its last attempt).',
      labelNames: ['template', 'outcome'],
      registers,
    });
  }

  /** The exposition in the Prometheus text format. */
  exposition(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /** One answer of the HTTP API. */
  httpRequest(operationId: string | undefined, status: number, seconds: number): void {
    const operation = operationId ?? UNMATCHED;
    let byStatus = this.#httpChildren.get(operation);
    if (!byStatus) this.#httpChildren.set(operation, (byStatus = new Map()));
    let child = byStatus.get(status);
    if (!child) byStatus.set(status, (child = this.#httpDuration.series({ operation_id: operation, status: String(status) })));
    child.observe(seconds);
  }

  /** The measures of an inference route (the engine path, such as `/v1/chat/completions`), bound once. */
  relay(route: string): RelayMetrics {
    let bound = this.#relays.get(route);
    if (bound) return bound;
    const upstream = this.#upstreamLatency.series({ route });
    const first = this.#firstChunk.series({ route });
    const streams = this.#activeStreams;
    streams.set(route, 0);
    bound = {
      opened: () => void streams.set(route, (streams.get(route) ?? 0) + 1),
      closed: () => void streams.set(route, (streams.get(route) ?? 1) - 1),
      upstreamLatency: (seconds) => upstream.observe(seconds),
      firstChunk: (seconds) => first.observe(seconds),
    };
    this.#relays.set(route, bound);
    return bound;
  }

  /** One batch of usage records: `records` in it, the insert's time. */
  usageFlush(outcome: UsageFlushOutcome, records: number, seconds: number): void {
    this.#usageFlushes[outcome].inc();
    this.#usageFlushDuration.observe(seconds);
    if (outcome === 'written') this.#usageRecords.written.inc(records);
  }

  /** Usage records of a refused batch, written one by one: how many went in, how many were refused. */
  usageRecordsOneByOne(written: number, refused: number): void {
    if (written) this.#usageRecords.written.inc(written);
    if (refused) this.#usageRecords.refused.inc(refused);
  }

  /** Where the count of usage records not written yet is read at scrape time. */
  watchUsage(waiting: () => number): void {
    this.#usageWaiting = waiting;
  }

  jobRun(queue: string, outcome: JobOutcome, seconds: number): void {
    this.#jobRuns.labels(queue, outcome).inc();
    this.#jobDuration.labels(queue).observe(seconds);
  }

  webhookAttempt(outcome: WebhookOutcome, seconds?: number): void {
    this.#webhookAttempts.labels(outcome).inc();
    if (seconds !== undefined) this.#webhookDuration.observe(seconds);
  }

  email(template: string, outcome: EmailOutcome): void {
    this.#emails.labels(template, outcome).inc();
  }

  /** Reports the depth of these pg-boss queues at each scrape. */
  watchQueues(boss: PgBoss, queues: readonly string[]): void {
    const names = [...new Set(queues)];
    this.#queues = new Snapshot(async () =>
      (await boss.getQueues(names)).map((q) => ({ name: q.name, ready: q.readyCount, deferred: q.deferredCount, active: q.activeCount, failed: q.failedCount })),
    );
  }

  /** Reports the deployments by status at each scrape. */
  watchDeployments(db: Knex): void {
    this.#deployments = new Snapshot(() => countActiveDeploymentsByStatus(db));
  }

  async #collectQueues(gauge: Gauge<'queue' | 'state'>): Promise<void> {
    if (!this.#queues) return;
    gauge.reset();
    try {
      for (const queue of await this.#queues.read()) {
        gauge.set({ queue: queue.name, state: 'ready' }, queue.ready);
        gauge.set({ queue: queue.name, state: 'deferred' }, queue.deferred);
        gauge.set({ queue: queue.name, state: 'active' }, queue.active);
        gauge.set({ queue: queue.name, state: 'failed' }, queue.failed);
      }
    } catch (error) {
      // No stale numbers: the series are absent from this scrape.
      this.#log.warn({ err: error }, 'metrics: the job queues could not be read');
    }
  }

  async #collectDeployments(gauge: Gauge<'status'>): Promise<void> {
    if (!this.#deployments) return;
    gauge.reset();
    try {
      const counts = await this.#deployments.read();
      for (const status of ACTIVE_STATUSES) gauge.set({ status }, counts.get(status) ?? 0);
    } catch (error) {
      this.#log.warn({ err: error }, 'metrics: the deployments could not be counted');
    }
  }
}

/** A value read at most every SNAPSHOT_MAX_AGE_MS; concurrent readers share one read. */
class Snapshot<T> {
  readonly #read: () => Promise<T>;
  #value: { at: number; value: T } | undefined;
  #pending: Promise<T> | undefined;

  constructor(read: () => Promise<T>) {
    this.#read = read;
  }

  read(): Promise<T> {
    if (this.#value && performance.now() - this.#value.at < SNAPSHOT_MAX_AGE_MS) return Promise.resolve(this.#value.value);
    this.#pending ??= this.#read()
      .then((value) => {
        this.#value = { at: performance.now(), value };
        return value;
      })
      .finally(() => {
        this.#pending = undefined;
      });
    return this.#pending;
  }
}
