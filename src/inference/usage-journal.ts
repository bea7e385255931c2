import { createHash, randomBytes } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';

/** After a failed append, how long the journal is not tried again (the caller commits to the database meanwhile). */
const RETRY_AFTER_MS = 5_000;

const SEGMENT = /^(?<host>.+)\.(?<pid>\d+)\.(?<token>[0-9a-f]{16})\.(?<sequence>\d+)\.jsonl$/;

/**
 * The usage write-ahead journal (issue #12: "group-commit it before the answer's last bytes, or
 * write it ahead"). Each usage record is appended to a file of this process, one JSON line, before
 * the answer's last bytes go out: a write to the page cache of the process's own machine, which a
 * killed process (SIGKILL, an out-of-memory kill) cannot take back, instead of a round trip to
 * Postgres that the answer waits for (0.8 ms when the database's backend was idle, as at one
 * connection: README, Benchmark). The records then go to Postgres in the recorder's batches.
 *
 * The open file (a segment) is sealed when the recorder takes a batch, so every record of a sealed
 * segment is in that batch or an earlier one still unwritten; once a batch is stored, the sealed
 * segments are deleted. Segments left by a process that is gone (killed, or the machine restarted
 * while it ran) are read back by `orphans` and stored by the recorder: each record is stored once
 * per usage id, so one also written before the kill is not doubled. A segment is named after its
 * machine, process id and a token of the process, so a process tells its own segments, those of a
 * live neighbour (left alone) and those of a dead one (the process id is gone, or it is this
 * process's id in an earlier life, as PID 1 in a restarted container) apart. The directory is meant
 * for one database and one machine (Kubernetes: the pod's `emptyDir`, which outlives a container
 * restart); segments of another machine are left alone.
 */
export class UsageJournal {
  readonly #dir: string;
  readonly #log: Logger;
  readonly #host = hostname().replaceAll(/[^A-Za-z0-9_-]/g, '_');
  readonly #token = randomBytes(8).toString('hex');
  #fd: number | undefined;
  #segment: string | undefined;
  #holdsRecords = false;
  #sequence = 0;
  #sealed: string[] = [];
  #retryAt = 0;
  /** Lines made in this turn of the event loop, written together at its end. */
  #pending: string[] = [];
  #group: Promise<boolean> | undefined;
  #settleGroup: ((written: boolean) => void) | undefined;

  constructor(dir: string, log: Logger) {
    this.#dir = dir;
    this.#log = log;
  }

  get directory(): string {
    return this.#dir;
  }

  /**
   * Appends a record (its JSON text, one line) with the others made in the same turn of the event
   * loop: one write for all of them, after the turn's I/O callbacks (at 64 connections a write per
   * answer cost as much as the rest of its metering). Resolves true once they are in the file,
   * false when it could not be written (a full or read-only disk), in which case the caller stores
   * them before the answers end instead; undefined when the journal is not tried now (a write
   * failed moments ago).
   */
  append(line: string): Promise<boolean> | undefined {
    if (this.#fd === undefined && Date.now() < this.#retryAt) return undefined;
    this.#pending.push(line);
    if (!this.#group) {
      this.#group = new Promise((resolve) => (this.#settleGroup = resolve));
      setImmediate(() => this.#writePending());
    }
    return this.#group;
  }

  #writePending(): void {
    const settle = this.#settleGroup;
    this.#group = undefined;
    this.#settleGroup = undefined;
    if (!this.#pending.length) return settle?.(true);
    const lines = `${this.#pending.join('\n')}\n`;
    this.#pending = [];
    try {
      this.#fd ??= this.#open();
      if (writeSync(this.#fd, lines) !== Buffer.byteLength(lines)) throw new Error('the usage journal took part of its records');
      this.#holdsRecords = true;
      settle?.(true);
    } catch (error) {
      // A partly written line is skipped when the segment is read back; nothing more goes after it.
      this.#log.error({ err: error, dir: this.#dir }, 'the usage journal could not be written; usage is stored before answers end instead');
      this.#retryAt = Date.now() + RETRY_AFTER_MS;
      this.#fd = this.#closed(this.#fd);
      settle?.(false);
    }
  }

  /** Closes the open segment (its records are all in the batch being taken or an earlier unwritten one). */
  seal(): void {
    // What is made but not written yet belongs to the batch being taken.
    this.#writePending();
    this.#fd = this.#closed(this.#fd);
  }

  /** Closes the open segment, kept for deletion once stored when it holds records; undefined. */
  #closed(fd: number | undefined): undefined {
    if (fd === undefined) return undefined;
    try {
      closeSync(fd);
    } finally {
      if (this.#holdsRecords) this.#sealed.push(this.#segment as string);
      else this.#remove(this.#segment as string);
      this.#segment = undefined;
      this.#holdsRecords = false;
    }
    return undefined;
  }

  /** Every record of the sealed segments is stored (or refused for good): they go. */
  stored(): void {
    for (const segment of this.#sealed.splice(0)) this.#remove(segment);
  }

  /** Seals the open segment and deletes it when it holds nothing unstored (the recorder stopped after a stored batch). */
  close(allStored: boolean): void {
    this.seal();
    if (allStored) this.stored();
  }

  /**
   * The segments of processes that are gone, each with its records' JSON texts (a line cut short by
   * the kill is skipped); `done(file)` deletes one once its records are stored.
   */
  orphans(): Array<{ file: string; lines: string[] }> {
    let names: string[];
    try {
      names = readdirSync(this.#dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw error;
    }
    const found: Array<{ file: string; lines: string[] }> = [];
    for (const name of names) {
      const owner = SEGMENT.exec(name)?.groups;
      if (!owner || !this.#isOrphan(owner as { host: string; pid: string; token: string })) continue;
      const file = path.join(this.#dir, name);
      const lines: string[] = [];
      for (const line of readFileSync(file, 'utf8').split('\n')) {
        if (!line) continue;
        try {
          JSON.parse(line);
          lines.push(line);
        } catch {
          this.#log.warn({ file }, 'a usage journal line cut short by a killed process was skipped');
        }
      }
      found.push({ file, lines });
    }
    return found;
  }

  /** Deletes a segment `orphans` gave once its records are stored. */
  done(file: string): void {
    this.#remove(file);
  }

  #isOrphan(owner: { host: string; pid: string; token: string }): boolean {
    if (owner.host !== this.#host) return false;
    const pid = Number(owner.pid);
    if (pid === process.pid) return owner.token !== this.#token;
    try {
      process.kill(pid, 0);
      return false;
    } catch (error) {
      // EPERM: the process exists (another user's).
      return (error as NodeJS.ErrnoException).code === 'ESRCH';
    }
  }

  #open(): number {
    mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
    this.#sequence += 1;
    const segment = path.join(this.#dir, `${this.#host}.${process.pid}.${this.#token}.${this.#sequence}.jsonl`);
    const fd = openSync(segment, 'a', 0o600);
    this.#segment = segment;
    return fd;
  }

  #remove(file: string): void {
    try {
      unlinkSync(file);
    } catch (error) {
      // Another process recovering the same orphan deleted it first.
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') this.#log.warn({ err: error, file }, 'a usage journal segment could not be deleted');
    }
  }
}

/**
 * The journal's directory when `USAGE_JOURNAL_DIR` is unset: one per database (its server, name and
 * options, never its credentials, hashed) under the machine's temporary directory.
 */
export function defaultUsageJournalDir(databaseUrl: string): string {
  const url = new URL(databaseUrl);
  const database = createHash('sha256').update(`${url.host}${url.pathname}${url.search}`).digest('hex').slice(0, 16);
  return path.join(tmpdir(), 'usage-journal', database);
}
