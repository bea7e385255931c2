import { PgBoss } from 'pg-boss';
import type { Logger } from 'pino';

/** A background job kind: its queue, how it retries, and what a worker does with it. */
export interface JobDefinition<Data extends object = object> {
  queue: string;
  /** Retries with exponential backoff; a job still failing after them is kept as failed. */
  retryLimit?: number;
  retryDelaySeconds?: number;
  /** How many jobs of this queue one worker process runs at once. */
  concurrency?: number;
  handle(data: Data, log: Logger): Promise<void>;
}

export interface JobQueueOptions {
  url: string;
  /** Run the workers of `jobs` in this process (ROLE worker or all). */
  work: boolean;
  jobs: JobDefinition[];
  log: Logger;
  poolMax?: number;
}

/**
 * Starts pg-boss on the service's Postgres. Every process can enqueue; only worker processes
 * consume, supervise and run schedules. Queues are created idempotently at start.
 */
export async function startJobQueue(options: JobQueueOptions): Promise<PgBoss> {
  const boss = new PgBoss({
    connectionString: options.url,
    application_name: 'model-deployment-service:jobs',
    max: options.poolMax ?? 5,
    supervise: options.work,
    schedule: options.work,
    useListenNotify: options.work,
  });
  boss.on('error', (error) => options.log.error({ err: error }, 'job queue error'));
  await boss.start();
  for (const job of options.jobs) {
    await boss.createQueue(job.queue, {
      retryLimit: job.retryLimit ?? 5,
      retryDelay: job.retryDelaySeconds ?? 2,
      retryBackoff: true,
      notify: true,
    });
  }
  if (options.work) {
    for (const job of options.jobs) {
      await boss.work<object>(job.queue, { batchSize: 1, localConcurrency: job.concurrency ?? 1 }, async ([item]) => {
        if (!item) return;
        const log = options.log.child({ queue: job.queue, job_id: item.id });
        await job.handle(item.data, log);
      });
    }
  }
  return boss;
}

/** Stops taking new jobs and waits for the running ones to finish, up to `timeoutMs`. */
export async function stopJobQueue(boss: PgBoss, timeoutMs: number): Promise<void> {
  await boss.stop({ graceful: true, timeout: timeoutMs, close: true });
}
