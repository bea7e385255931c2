import type { Knex } from 'knex';
import type { Logger } from 'pino';
import { isDatabaseUnreachable } from '../db/errors.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { UsageWriter, type NewUsageRecord } from './inference.repository.ts';

/** What a route is metered in: tokens (chat, embeddings, rerank), images, or requests (transcriptions). */
export type UsageUnit = 'token' | 'image' | 'request';

export interface UsageRecord {
  /** Made by the service for this request; the key of the record. */
  usageId: string;
  /** A label: the id echoed in `X-Request-Id` (the client's, when it sent a well-formed one). */
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
  unit: UsageUnit;
  /** How many units: `totalTokens` for tokens, images generated, or 1 request. */
  quantity: number;
  /** `aborted`: the client left, or the engine failed or stalled, before the answer ended. */
  outcome: 'completed' | 'aborted';
  /** True when the token counts are the proxy's estimate rather than the engine's report. */
  estimated: boolean;
  /**
   * When the answer ended (or was cut short): the record's `created_at`, which decides its month's
   * partition and the hour it is rolled up in. Stamped once, so a batch written again stores nothing twice.
   */
  recordedAt: Date;
}

/** Records kept in memory while the database cannot be written (about a minute at 1,000 requests a second). */
const MAX_UNWRITTEN = 100_000;

/**
 * Usage of inference requests, kept in memory and written in batches (every second, or at 500
 * records), so no request waits on a database write. Each record is stored once per `usageId`, an
 * id the service makes (the client's `X-Request-Id` is only a label). A batch the database refused
 * (it is restarting, unreachable) is retried at the next flush, up to MAX_UNWRITTEN records.
 * An answer delivered in full is committed before its last bytes go out (`commit`); what is
 * buffered with `record` (answers cut short) when a process dies unexpectedly is lost, up to a
 * second of them; a graceful stop flushes it.
 */
export class UsageRecorder {
  readonly #writer: UsageWriter;
  readonly #log: Logger;
  readonly #metrics: Metrics | undefined;
  #buffer: UsageRecord[] = [];
  #timer: NodeJS.Timeout | undefined;
  #flushing: Promise<void> = Promise.resolve();

  constructor(db: Knex, log: Logger, metrics?: Metrics) {
    this.#writer = new UsageWriter(db);
    this.#log = log;
    this.#metrics = metrics;
    metrics?.watchUsage(() => this.#buffer.length);
  }

  /** Writes every `intervalMs`, on a connection of the pool it holds until `stop`. */
  start(intervalMs = 1_000): void {
    this.#writer.hold();
    this.#timer = setInterval(() => void this.flush(), intervalMs);
    this.#timer.unref();
  }

  /**
   * Records the usage and resolves once it is written, with whatever else is buffered by then: a
   * group commit (requests that end together share one insert). Used for an answer delivered in
   * full, before its last bytes go out, so a process killed afterwards has its usage.
   */
  commit(usage: UsageRecord): Promise<void> {
    this.#buffer.push(usage);
    return this.flush();
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
    await this.#writer.release();
  }

  async #write(): Promise<void> {
    const batch = this.#buffer.splice(0);
    if (!batch.length) return;
    const started = performance.now();
    try {
      await this.#writer.insert(batch.map(toRow));
      this.#metrics?.usageFlush('written', batch.length, (performance.now() - started) / 1000);
    } catch (error) {
      this.#metrics?.usageFlush(isDatabaseUnreachable(error) ? 'deferred' : 'refused', batch.length, (performance.now() - started) / 1000);
      if (isDatabaseUnreachable(error)) {
        // Kept for the next flush (the database may be restarting): each record is stored once by
        // its usage id, so a batch written after all is not doubled. Beyond the cap, the oldest go.
        this.#buffer = [...batch, ...this.#buffer].slice(-MAX_UNWRITTEN);
        this.#log.error({ err: error, records: batch.length, waiting: this.#buffer.length }, 'usage records could not be written; retrying');
        return;
      }
      // The database refused the data: one by one, so that one bad record does not hold back the rest.
      this.#log.error({ err: error, records: batch.length }, 'usage records could not be written');
      let refusedRecords = 0;
      for (const record of batch) {
        await this.#writer.insert([toRow(record)]).catch((refused: unknown) => {
          refusedRecords += 1;
          this.#log.error({ err: refused, usage_id: record.usageId }, 'a usage record was refused');
        });
      }
      this.#metrics?.usageRecordsOneByOne(batch.length - refusedRecords, refusedRecords);
    }
  }
}

/** A usage record as its row. */
function toRow(u: UsageRecord): NewUsageRecord {
  return {
    usage_id: u.usageId,
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
    unit: u.unit,
    quantity: u.quantity,
    outcome: u.outcome,
    estimated: u.estimated,
    created_at: u.recordedAt,
  };
}
