import type { Knex } from 'knex';
import { fromKnex, PgBoss, type JobResult, type SendOptions } from 'pg-boss';
import type { Logger } from 'pino';

/** The outcome of a run of a background job: done; failed and retried later; failed on its last attempt. */
export type JobOutcome = 'completed' | 'retrying' | 'failed';

/** What the queue reports to the metrics (src/metrics/metrics.ts implements it). */
export interface JobMetrics {
  jobRun(queue: string, outcome: JobOutcome, seconds: number): void;
  /** Reads the depth of these queues at each scrape. */
  watchQueues(boss: PgBoss, queues: readonly string[]): void;
}

const DEFAULT_RETRY_DELAY_SECONDS = 2;
/**
 * How often an idle fetcher looks for jobs nobody woke it for: those delayed or retried by another
 * process, or left by one that died. New jobs wake it through NOTIFY, and the delayed jobs and
 * retries of this process wake it when due (`sendLater`, the batch handler below), so the backstop
 * only bounds how late an orphan is taken. (Every 5 s, the eight unscheduled queues were 1.6
 * fetches a second in an idle ROLE=all process.)
 */
const BACKSTOP_POLLING_SECONDS = 30;
/**
 * The backstop of a scheduled queue (metering, usage reporting, spending alerts, pruning): its jobs
 * come from the schedule, which wakes the fetcher like any new job, and run once a minute at most
 * often, so a poll every 5 s found nothing 11 times in 12 (five such queues were about a fifth of
 * the idle CPU of ROLE=all).
 */
const SCHEDULED_BACKSTOP_POLLING_SECONDS = 60;
/** A wake-up comes this long after the job's due time, so that the database sees it due. */
const WAKE_MARGIN_MS = 50;

/**
 * pg-boss's own queue of due schedules (its timekeeper puts each due cron job there, every 30 s,
 * and a worker of its own sends it on). Created without NOTIFY, so that worker polls it every 5 s;
 * with NOTIFY it is woken by each insert and its backstop is 30 s.
 */
const PG_BOSS_SCHEDULE_QUEUE = '__pgboss__send-it';
/**
 * Connections of pg-boss's pool are kept this long unused (pg's default is 10 s): the per-minute
 * schedules and 30 s backstops otherwise closed and opened a connection (a new Postgres backend)
 * every minute or so: about 2 ms of CPU a second of an idle ROLE=all service (bench idle phase).
 */
const JOB_POOL_IDLE_MS = 300_000;
/** How often pg-boss looks for flows (job dependencies) to resolve: none are used here. */
const FLOW_POLLING_SECONDS = 300;

/** The fetcher of each queue this process works, per pg-boss instance. */
const fetchers = new WeakMap<PgBoss, Map<string, string>>();

/** Wakes this process's fetcher of `queue`, if it works that queue, once a job delayed until `at` is due. */
function wakeWhenDue(boss: PgBoss, queue: string, at: number): void {
  const fetcher = fetchers.get(boss)?.get(queue);
  if (!fetcher) return;
  setTimeout(() => boss.notifyWorker(fetcher), Math.max(0, at - Date.now()) + WAKE_MARGIN_MS).unref();
}

/** Enqueues a job to run `afterSeconds` from now; this process's fetcher of its queue takes it when due, not at its next poll. */
export async function sendLater(boss: PgBoss, queue: string, data: object, options: { singletonKey: string; afterSeconds: number }): Promise<void> {
  const at = Date.now() + options.afterSeconds * 1000;
  await boss.send(queue, data, { singletonKey: options.singletonKey, startAfter: new Date(at) });
  wakeWhenDue(boss, queue, at);
}

/**
 * A job that runs again after each run ends, whatever the run's outcome: `intervalSeconds` later,
 * or as many seconds as the run returned. One queued at a time across all workers under `key` (a
 * chain; `startChain` starts it in a worker).
 */
export function chainedJob(
  boss: PgBoss,
  chain: { queue: string; key: string; intervalSeconds: number },
  run: (log: Logger) => Promise<number | undefined> | Promise<void>,
): JobDefinition<object> {
  return {
    queue: chain.queue,
    policy: 'short',
    retryLimit: 0,
    async handle(_data, { log }) {
      let next = chain.intervalSeconds;
      try {
        next = (await run(log)) ?? next;
      } finally {
        await sendLater(boss, chain.queue, {}, { singletonKey: chain.key, afterSeconds: next });
      }
    },
  };
}

/** Starts a chain of `chainedJob` (one queued run at a time across all workers). */
export async function startChain(boss: PgBoss, chain: { queue: string; key: string }): Promise<void> {
  await boss.send(chain.queue, {}, { singletonKey: chain.key });
}

/**
 * Runs a chain's next run now rather than when it was due: its queued run is cancelled and one is
 * sent for now (a run under way is left to finish; its successor is then the one sent here, the
 * queue holding one run of the key). From any process.
 */
export async function hurryChain(boss: PgBoss, chain: { queue: string; key: string }): Promise<void> {
  const queued = await boss.findJobs(chain.queue, { key: chain.key, queued: true });
  if (queued.length) await boss.cancel(chain.queue, queued.map((job) => job.id));
  await startChain(boss, chain);
}

/** What a job handler knows about the attempt it runs. */
export interface JobContext {
  log: Logger;
  /** 0 on the first attempt. */
  retryCount: number;
  /** True when a failure now is final: no retry follows. */
  lastAttempt: boolean;
}

/** A background job kind: its queue, how it retries, and what a worker does with it. */
export interface JobDefinition<Data extends object = object> {
  queue: string;
  /** Retries with exponential backoff; a job still failing after them is kept as failed. */
  retryLimit?: number;
  retryDelaySeconds?: number;
  /** The longest wait between two retries (the backoff stops doubling there); no limit by default. */
  retryDelayMaxSeconds?: number;
  /** How many jobs of this queue one worker process runs at once. */
  concurrency?: number;
  /** A cron expression (UTC) when the job runs on a schedule, once across all workers. */
  schedule?: string;
  /**
   * pg-boss queue policy; `short` with a `singletonKey` keeps at most one queued job per key (a
   * deployment's step is queued once, however many times it is asked for).
   */
  policy?: 'standard' | 'short';
  /** How often an idle worker looks for jobs nothing woke it for (30 s by default, 60 s for a scheduled job; see BACKSTOP_POLLING_SECONDS). */
  pollingIntervalSeconds?: number;
  handle(data: Data, context: JobContext): Promise<void>;
}

export interface JobQueueOptions {
  url: string;
  /** This process consumes jobs, supervises queues and runs schedules (ROLE worker or all). */
  work: boolean;
  log: Logger;
  poolMax?: number;
}

/** pg-boss on the service's Postgres, not started yet. Every process can enqueue. */
export function createJobQueue(options: JobQueueOptions): PgBoss {
  // Passed through to pg's Pool with the connection settings (pg-boss's types do not name it).
  const pool: { idleTimeoutMillis: number } = { idleTimeoutMillis: JOB_POOL_IDLE_MS };
  const boss = new PgBoss({
    connectionString: options.url,
    application_name: 'model-deployment-service:jobs',
    max: options.poolMax ?? 5,
    ...pool,
    supervise: options.work,
    schedule: options.work,
    flowIntervalSeconds: FLOW_POLLING_SECONDS,
    useListenNotify: options.work,
  });
  boss.on('error', (error) => options.log.error({ err: error }, 'job queue error'));
  return boss;
}

/** Starts the queue, creates every job's queue idempotently, and in workers starts consuming. */
export async function startJobQueue(boss: PgBoss, options: { work: boolean; jobs: JobDefinition[]; log: Logger; metrics?: JobMetrics | undefined }): Promise<void> {
  await boss.start();
  for (const job of options.jobs) {
    const retries = {
      retryLimit: job.retryLimit ?? 5,
      retryDelay: job.retryDelaySeconds ?? DEFAULT_RETRY_DELAY_SECONDS,
      retryBackoff: true,
      ...(job.retryDelayMaxSeconds ? { retryDelayMax: job.retryDelayMaxSeconds } : {}),
    };
    await boss.createQueue(job.queue, { policy: job.policy ?? 'standard', notify: true, ...retries });
    // A queue that exists keeps what it was created with: settings changed since apply now.
    await boss.updateQueue(job.queue, retries);
  }
  if (!options.work) return;
  await boss.updateQueue(PG_BOSS_SCHEDULE_QUEUE, { notify: true });
  for (const job of options.jobs) {
    if (job.schedule) await boss.schedule(job.queue, job.schedule);
    await workOn(boss, job, options.log, options.metrics);
  }
  // The depth of the queues this process works, read at each scrape (docs/operating.md: Metrics).
  options.metrics?.watchQueues(boss, options.jobs.map((job) => job.queue));
}

/**
 * Consumes a queue in this process with one fetcher, whatever its concurrency: each fetch takes up
 * to `concurrency` jobs, run side by side and settled one by one (a failed job is retried on its
 * own). pg-boss's `localConcurrency` would start that many fetchers, each polling on its own (8
 * workers on each provisioning queue at 0.5 s were 48 fetches a second, 16 to 18 ms of CPU a
 * second in the service and 26 in Postgres, idle). The fetcher is woken at once for a new job
 * (LISTEN/NOTIFY), when a delayed job or a retry of this process falls due, and after a full batch;
 * otherwise it polls every 30 s (60 s for a scheduled queue). The price of batches: a job queued while a batch runs waits for
 * that batch's slowest job.
 */
export async function workOn(boss: PgBoss, job: JobDefinition, log: Logger, metrics?: JobMetrics): Promise<void> {
  const interval = job.pollingIntervalSeconds ?? (job.schedule ? SCHEDULED_BACKSTOP_POLLING_SECONDS : BACKSTOP_POLLING_SECONDS);
  const retryDelayMs = (job.retryDelaySeconds ?? DEFAULT_RETRY_DELAY_SECONDS) * 1000;
  const retryDelayMaxMs = job.retryDelayMaxSeconds ? job.retryDelayMaxSeconds * 1000 : Number.POSITIVE_INFINITY;
  const fetcher = await boss.work(
    job.queue,
    {
      batchSize: job.concurrency ?? 1,
      localConcurrency: 1,
      includeMetadata: true,
      perJobResults: true,
      // A full batch says more jobs are waiting: fetch again at once rather than after the interval.
      burstWhenBatchFull: true,
      pollingIntervalSeconds: interval,
      notifyPollingIntervalSeconds: interval,
    },
    (items) =>
      Promise.all(
        items.map(async (item): Promise<JobResult> => {
          const jobLog = log.child({ queue: job.queue, job_id: item.id });
          const started = performance.now();
          const lastAttempt = item.retryCount >= item.retryLimit;
          try {
            await job.handle(item.data as object, { log: jobLog, retryCount: item.retryCount, lastAttempt });
            metrics?.jobRun(job.queue, 'completed', (performance.now() - started) / 1000);
            return { id: item.id, status: 'completed' };
          } catch (error) {
            metrics?.jobRun(job.queue, lastAttempt ? 'failed' : 'retrying', (performance.now() - started) / 1000);
            // pg-boss retries it after a backoff of at most delay x 2^(n+1) (its plans.js: half of that plus a random half).
            if (item.retryCount < item.retryLimit) wakeWhenDue(boss, job.queue, Date.now() + Math.min(retryDelayMs * 2 ** (item.retryCount + 1), retryDelayMaxMs));
            return { id: item.id, status: 'failed', output: error };
          }
        }),
      ),
  );
  const ofThisBoss = fetchers.get(boss) ?? new Map<string, string>();
  ofThisBoss.set(job.queue, fetcher);
  fetchers.set(boss, ofThisBoss);
}

/** Stops taking new jobs and waits for the running ones to finish, up to `timeoutMs`. */
export async function stopJobQueue(boss: PgBoss, timeoutMs: number): Promise<void> {
  await boss.stop({ graceful: true, timeout: timeoutMs, close: true });
}

/** Enqueues a job inside the caller's transaction: it exists only if the transaction commits. */
export async function enqueue(boss: PgBoss, trx: Knex.Transaction, queue: string, data: object, options: SendOptions = {}): Promise<string | null> {
  return boss.send(queue, data, { ...options, db: fromKnex(trx) });
}
