import type { Knex } from 'knex';
import type { Logger } from 'pino';
import { isDatabaseUnreachable } from '../db/errors.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { usageJson, UsageWriter, type NewUsageRecord } from './inference.repository.ts';
import type { UsageJournal } from './usage-journal.ts';

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

/** The longest an answer's last bytes wait for its usage's insert when it is not journaled (the database may be down). */
const COMMIT_WAIT_MS = 1_000;

/** Records stored per insert when a dead process's journal is read back. */
const RECOVERY_BATCH = 500;

/** How often (in flushes) the journal directory is looked at for segments of processes that died. */
const ORPHAN_SCAN_EVERY = 60;

/**
 * Usage of inference requests, kept in memory and written in batches (every second, or at 500
 * records), so no request waits on a database write. Each record is stored once per `usageId`; a
 * refused batch is retried at the next flush, up to MAX_UNWRITTEN records. With a journal (the
 * default) every record is appended to it as it is made, so a killed process loses none. Without
 * one, or while it cannot be written, an answer delivered in full is committed before its last bytes
 * go out (`commit`), and up to a second of cut-short answers is lost if the process dies. See
 * docs/decisions/2026-11-26-usage-journal.md.
 */
export class UsageRecorder {
  readonly #writer: UsageWriter;
  readonly #log: Logger;
  readonly #metrics: Metrics | undefined;
  readonly #journal: UsageJournal | undefined;
  /**
   * Each record as its JSON text, as the journal holds it and as the insert sends it: one string a
   * record, where a row object held for up to a second was 17 objects for the collector to copy.
   */
  #buffer: string[] = [];
  #timer: NodeJS.Timeout | undefined;
  #flushing: Promise<void> = Promise.resolve();
  #flushes = 0;
  #journaling: Promise<boolean> | undefined;
  #journaled: Promise<void> | undefined;

  constructor(db: Knex, log: Logger, options: { metrics?: Metrics | undefined; journal?: UsageJournal | undefined } = {}) {
    this.#writer = new UsageWriter(db);
    this.#log = log;
    this.#metrics = options.metrics;
    this.#journal = options.journal;
    this.#metrics?.watchUsage(() => this.waiting);
  }

  /**
   * Stores what processes that died left in the journal, then writes every `intervalMs`, on a
   * connection of the pool it holds until `stop`.
   */
  async start(intervalMs = 1_000): Promise<void> {
    this.#writer.hold();
    await this.recoverOrphans();
    this.#timer = setInterval(() => {
      void this.flush();
      if (++this.#flushes % ORPHAN_SCAN_EVERY === 0) void this.recoverOrphans();
    }, intervalMs);
    this.#timer.unref();
  }

  /**
   * Records the usage of an answer delivered in full, before its last bytes go out, so that a
   * process killed afterwards has it: appended to the journal with the others of this turn of the
   * event loop, or else written with whatever else is buffered by then (a group commit: requests
   * that end together share one insert); the promise resolves once it is, or after COMMIT_WAIT_MS
   * without a database (the record is kept for the next flush).
   */
  commit(usage: UsageRecord): Promise<void> {
    const group = this.#take(usage);
    if (!group) return this.#committed();
    // One promise per group of records journaled together.
    if (group !== this.#journaling) {
      this.#journaling = group;
      this.#journaled = group.then((written) => (written ? undefined : this.#committed()));
    }
    return this.#journaled as Promise<void>;
  }

  /** The buffer written (a group commit), or COMMIT_WAIT_MS passed: an answer's end waits no longer for a database that does not answer. */
  async #committed(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<void>((resolve) => (timer = setTimeout(resolve, COMMIT_WAIT_MS)));
    await Promise.race([this.flush().catch(() => undefined), waited]);
    clearTimeout(timer);
  }

  record(usage: UsageRecord): void {
    void this.#take(usage);
  }

  /** Buffers the record as its JSON text and appends it to the journal: the journal's group, when it took it. */
  #take(usage: UsageRecord): Promise<boolean> | undefined {
    const line = JSON.stringify(toRow(usage));
    this.#buffer.push(line);
    const group = this.#journal?.append(line);
    if (this.#buffer.length >= 500) void this.flush();
    return group;
  }

  /** Records made and not written yet (the metric `mds_usage_records_waiting`). */
  get waiting(): number {
    return this.#buffer.length;
  }

  /** Writes what is buffered; concurrent calls run one after the other. */
  flush(): Promise<void> {
    this.#flushing = this.#flushing.then(() => this.#write());
    return this.#flushing;
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.flush();
    this.#journal?.close(this.#buffer.length === 0);
    await this.#writer.release();
  }

  /**
   * Stores the records of journal segments that processes which are gone left behind, then deletes
   * those segments; in turn with the flushes (one write at a time on the held connection).
   */
  recoverOrphans(): Promise<void> {
    this.#flushing = this.#flushing.then(() => this.#recover());
    return this.#flushing;
  }

  async #recover(): Promise<void> {
    if (!this.#journal) return;
    try {
      for (const { file, lines } of this.#journal.orphans()) {
        for (let at = 0; at < lines.length; at += RECOVERY_BATCH) {
          const chunk = lines.slice(at, at + RECOVERY_BATCH);
          await this.#writer.insert(usageJson(chunk)).catch((error: unknown) => {
            // Unreachable: kept on disk for the next look. Refused: record by record.
            if (isDatabaseUnreachable(error)) throw error;
            return this.#oneByOne(chunk);
          });
        }
        this.#journal.done(file);
        this.#log.info({ file, records: lines.length }, 'usage records of a process that died stored from its journal');
      }
    } catch (error) {
      // Kept on disk for the next look (the database may be restarting).
      this.#log.error({ err: error, dir: this.#journal.directory }, 'usage records left in the journal by a process that died could not be stored yet');
    }
  }

  async #write(): Promise<void> {
    // Every record the open segment holds is in this batch (or an earlier one still unwritten).
    this.#journal?.seal();
    const batch = this.#buffer.splice(0);
    if (!batch.length) return;
    const started = performance.now();
    try {
      await this.#writer.insert(usageJson(batch));
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
      await this.#oneByOne(batch);
    }
    // Stored, or refused for good: the sealed segments hold nothing more to store.
    this.#journal?.stored();
  }

  /** Stores the records one by one, so that one the database refuses (logged, dropped) does not hold back the rest. */
  async #oneByOne(lines: readonly string[]): Promise<void> {
    let refusedRecords = 0;
    for (const line of lines) {
      await this.#writer.insert(usageJson([line])).catch((refused: unknown) => {
        refusedRecords += 1;
        this.#log.error({ err: refused, usage_id: (JSON.parse(line) as Partial<NewUsageRecord> | null)?.usage_id }, 'a usage record was refused');
      });
    }
    this.#metrics?.usageRecordsOneByOne(lines.length - refusedRecords, refusedRecords);
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
    created_at: isoTimestamp(u.recordedAt),
  };
}

let isoSecondStart = Number.NaN;
let isoSecond = '';

/**
 * `date.toISOString()` for a date after 1970, with the formatting of its second done once per
 * second (records made together share it): formatting every record's date took 6 µs of CPU a
 * request at 64 connections.
 */
export function isoTimestamp(date: Date): string {
  const ms = date.getTime();
  const millis = ms % 1000;
  if (ms - millis !== isoSecondStart) {
    isoSecondStart = ms - millis;
    isoSecond = new Date(isoSecondStart).toISOString().slice(0, 20);
  }
  return `${isoSecond}${String(millis).padStart(3, '0')}Z`;
}
