import type { Knex } from 'knex';
import { fromKnex, PgBoss, type SendOptions } from 'pg-boss';
import type { Logger } from 'pino';

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
  /** How many jobs of this queue one worker process runs at once. */
  concurrency?: number;
  /** A cron expression (UTC) when the job runs on a schedule, once across all workers. */
  schedule?: string;
  /**
   * pg-boss queue policy; `short` with a `singletonKey` keeps at most one queued job per key (a
   * deployment's step is queued once, however many times it is asked for).
   */
  policy?: 'standard' | 'short';
  /** How often an idle worker looks for due delayed jobs and retries of this queue. */
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
  const boss = new PgBoss({
    connectionString: options.url,
    application_name: 'model-deployment-service:jobs',
    max: options.poolMax ?? 5,
    supervise: options.work,
    schedule: options.work,
    useListenNotify: options.work,
  });
  boss.on('error', (error) => options.log.error({ err: error }, 'job queue error'));
  return boss;
}

/** Starts the queue, creates every job's queue idempotently, and in workers starts consuming. */
export async function startJobQueue(boss: PgBoss, options: { work: boolean; jobs: JobDefinition[]; log: Logger }): Promise<void> {
  await boss.start();
  for (const job of options.jobs) {
    await boss.createQueue(job.queue, {
      policy: job.policy ?? 'standard',
      retryLimit: job.retryLimit ?? 5,
      retryDelay: job.retryDelaySeconds ?? 2,
      retryBackoff: true,
      notify: true,
    });
  }
  if (!options.work) return;
  for (const job of options.jobs) {
    if (job.schedule) await boss.schedule(job.queue, job.schedule);
    await workOn(boss, job, options.log);
  }
}

/** Consumes a queue in this process. */
export async function workOn(boss: PgBoss, job: JobDefinition, log: Logger): Promise<void> {
  await boss.work(
    job.queue,
    // NOTIFY wakes workers for new jobs at once; retries and delayed jobs are found by polling.
    {
      batchSize: 1,
      localConcurrency: job.concurrency ?? 1,
      includeMetadata: true,
      pollingIntervalSeconds: job.pollingIntervalSeconds ?? 2,
      notifyPollingIntervalSeconds: job.pollingIntervalSeconds ?? 2,
    },
    async ([item]) => {
      if (!item) return;
      const jobLog = log.child({ queue: job.queue, job_id: item.id });
      await job.handle(item.data as object, { log: jobLog, retryCount: item.retryCount, lastAttempt: item.retryCount >= item.retryLimit });
    },
  );
}

/** Stops taking new jobs and waits for the running ones to finish, up to `timeoutMs`. */
export async function stopJobQueue(boss: PgBoss, timeoutMs: number): Promise<void> {
  await boss.stop({ graceful: true, timeout: timeoutMs, close: true });
}

/** Enqueues a job inside the caller's transaction: it exists only if the transaction commits. */
export async function enqueue(boss: PgBoss, trx: Knex.Transaction, queue: string, data: object, options: SendOptions = {}): Promise<string | null> {
  return boss.send(queue, data, { ...options, db: fromKnex(trx) });
}
