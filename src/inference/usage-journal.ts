import { createHash, createHmac, randomBytes } from 'node:crypto';
import { closeSync, lstatSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import { constantTimeEqual } from '../crypto.ts';

/** After a failed append, how long the journal is not tried again (the caller commits to the database meanwhile). */
const RETRY_AFTER_MS = 5_000;

const SEGMENT = /^(?<host>.+)\.(?<pid>\d+)\.(?<token>[0-9a-f]{16})\.(?<sequence>\d+)\.jsonl$/;

/** The purpose of the key (derived from `APP_SECRET`, src/crypto.ts) that signs each journal line. */
export const USAGE_JOURNAL_KEY_PURPOSE = 'usage-journal';

/** Why a journal directory may not be used (anyone else who can write in it can plant usage), or undefined when it may. */
export function unsafeDirectoryReason(dir: string): string | undefined {
  const stat = lstatSync(dir);
  if (stat.isSymbolicLink()) return 'it is a symbolic link';
  if (!stat.isDirectory()) return 'it is not a directory';
  const uid = process.getuid?.();
  if (uid !== undefined && stat.uid !== uid) return `it is owned by user ${stat.uid}, not by this process's user ${uid}`;
  if (stat.mode & 0o022) return `its group or other users may write in it (mode ${(stat.mode & 0o777).toString(8).padStart(4, '0')})`;
  return undefined;
}

class UnsafeJournalDirectory extends Error {}

/**
 * The usage write-ahead journal: each record is appended, one signed JSON line, to a file of this
 * process before the answer's last bytes go out, which a killed process cannot take back, instead of
 * a Postgres round trip the answer would wait for. The open segment is sealed when the recorder takes
 * a batch, so a sealed segment's records are in that batch or an earlier unwritten one; segments are
 * deleted once stored. Segments of dead processes on this machine are read back by `orphans`. The
 * directory and lines are checked before they are trusted. Why and how:
 * docs/decisions/2026-11-26-usage-journal.md.
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
  readonly #key: Buffer;
  /** Orphan segments that held a line without a valid HMAC: kept aside instead of deleted. */
  readonly #refused = new Set<string>();

  /** `key`: the journal's HMAC key (`Keyring.key(USAGE_JOURNAL_KEY_PURPOSE)`). */
  constructor(dir: string, log: Logger, key: Buffer) {
    this.#dir = dir;
    this.#log = log;
    this.#key = key;
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
    this.#pending.push(`${this.#mac(line)} ${line}`);
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
      const alert = error instanceof UnsafeJournalDirectory ? { alert: 'usage_journal_directory_refused', reason: error.message } : {};
      this.#log.error({ err: error, dir: this.#dir, ...alert }, 'the usage journal could not be written; usage is stored before answers end instead');
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
   * the kill is skipped, and so is, with an alert, a line without a valid HMAC); `done(file)`
   * deletes one once its records are stored. Nothing is read from a directory that may not be used.
   */
  orphans(): Array<{ file: string; lines: string[] }> {
    let names: string[];
    try {
      const unsafe = unsafeDirectoryReason(this.#dir);
      if (unsafe) {
        this.#log.error(
          { dir: this.#dir, alert: 'usage_journal_directory_refused', reason: unsafe },
          `the usage journal directory is refused, and the segments in it are not read: ${unsafe}`,
        );
        return [];
      }
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
      found.push({ file, lines: this.#authentic(file) });
    }
    return found;
  }

  /** The JSON texts of a segment's lines that carry a valid HMAC. */
  #authentic(file: string): string[] {
    const lines = readFileSync(file, 'utf8').split('\n');
    // What follows the last newline is a line the kill cut short (every write ends with one).
    if (lines.pop()) this.#log.warn({ file }, 'a usage journal line cut short by a killed process was skipped');
    const authentic: string[] = [];
    let forged = 0;
    for (const line of lines) {
      const space = line.indexOf(' ');
      const json = line.slice(space + 1);
      if (space > 0 && constantTimeEqual(line.slice(0, space), this.#mac(json))) authentic.push(json);
      else forged += 1;
    }
    if (forged) {
      this.#refused.add(file);
      this.#log.error(
        { file, alert: 'usage_journal_forged', lines: forged, stored: authentic.length },
        'usage journal lines without a valid HMAC were skipped (planted or altered); the segment is kept as .refused',
      );
    }
    return authentic;
  }

  /** Deletes a segment `orphans` gave once its records are stored; one that held forged lines is kept aside. */
  done(file: string): void {
    if (!this.#refused.delete(file)) return this.#remove(file);
    try {
      renameSync(file, `${file}.refused`);
    } catch (error) {
      this.#log.warn({ err: error, file }, 'a refused usage journal segment could not be set aside');
    }
  }

  #mac(json: string): string {
    return createHmac('sha256', this.#key).update(json).digest('base64url');
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
    const unsafe = unsafeDirectoryReason(this.#dir);
    if (unsafe) throw new UnsafeJournalDirectory(`the usage journal directory is refused: ${unsafe}`);
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
