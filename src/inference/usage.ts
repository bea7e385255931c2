import type { Knex } from 'knex';
import type { Logger } from 'pino';

export interface UsageRecord {
  requestId: string;
  organizationId: number;
  deploymentId: string | null;
  apiKeyId: number | null;
  userId: number | null;
  route: string;
  model: string;
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
}

/**
 * Usage of inference requests, kept in memory and written in batches (every second, or at 500
 * records), so no request waits on a database write. Each record is stored once per request id.
 * What is buffered when a process dies unexpectedly is lost; a graceful stop flushes it.
 */
export class UsageRecorder {
  readonly #db: Knex;
  readonly #log: Logger;
  #buffer: UsageRecord[] = [];
  #timer: NodeJS.Timeout | undefined;
  #flushing: Promise<void> = Promise.resolve();

  constructor(db: Knex, log: Logger) {
    this.#db = db;
    this.#log = log;
  }

  start(intervalMs = 1_000): void {
    this.#timer = setInterval(() => void this.flush(), intervalMs);
    this.#timer.unref();
  }

  record(usage: UsageRecord): void {
    this.#buffer.push(usage);
    if (this.#buffer.length >= 500) void this.flush();
  }

  /** Writes what is buffered; concurrent calls run one after the other. */
  flush(): Promise<void> {
    this.#flushing = this.#flushing.then(() => this.#write());
    return this.#flushing;
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.flush();
  }

  async #write(): Promise<void> {
    const batch = this.#buffer.splice(0);
    if (!batch.length) return;
    try {
      await this.#db('usage_records')
        .insert(
          batch.map((u) => ({
            request_id: u.requestId,
            organization_id: u.organizationId,
            deployment_id: u.deploymentId,
            api_key_id: u.apiKeyId,
            user_id: u.userId,
            route: u.route,
            model: u.model,
            prompt_tokens: u.promptTokens,
            completion_tokens: u.completionTokens,
            total_tokens: u.totalTokens,
          })),
        )
        .onConflict('request_id')
        .ignore();
    } catch (error) {
      this.#log.error({ err: error, records: batch.length }, 'usage records could not be written');
    }
  }
}
