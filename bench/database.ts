import { chmodSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { ensureDatabase, startEmbeddedPostgres, type RunningPostgres } from '../src/db/embedded-postgres.ts';
import { createLogger } from '../src/logger.ts';
import { freePort } from './processes.ts';

/**
 * The database of one benchmark run: a fresh database on the server of DATABASE_URL, or (when the
 * benchmark asks for it) on the machine's Postgres at 127.0.0.1:5432 if it answers, or else an
 * embedded Postgres in a temporary directory that this process starts and stops. Never the
 * `postgres` database itself: that one only creates and drops the run's.
 */
export interface BenchDatabase {
  url: string;
  name: string;
  description: string;
  /** Drops the database (or stops the embedded server); a server's database stays when it was opened to be kept or reused. */
  close(): Promise<void>;
}

/** The machine's own Postgres, as Debian's package sets it up (trust on loopback). */
export const MACHINE_POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

/** True when a server answers `url` within `timeoutMs`. */
export async function answers(url: string, timeoutMs = 1500): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: timeoutMs });
  try {
    await client.connect();
    await client.query('select 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

function withDatabase(url: string, database: string): string {
  const target = new URL(url);
  target.pathname = `/${database}`;
  return target.toString();
}

/**
 * Opens the run's database. `prefix` names it (`<prefix>_<pid>_<ms>`); `machinePostgres` tries the
 * machine's Postgres before the embedded one; `reuse` names an existing database on that server to
 * use as it is (nothing created, nothing dropped); `keep` leaves a database on a server in place at the end.
 */
export async function openDatabase(workDir: string, options: { prefix: string; machinePostgres?: boolean; reuse?: string; keep?: boolean }): Promise<BenchDatabase> {
  let serverUrl = process.env.DATABASE_URL;
  let where = 'the server of DATABASE_URL';
  if (!serverUrl && options.machinePostgres && (await answers(MACHINE_POSTGRES_URL))) {
    serverUrl = MACHINE_POSTGRES_URL;
    where = "the machine's Postgres at 127.0.0.1:5432";
  }
  if (serverUrl) {
    const admin = withDatabase(serverUrl, 'postgres');
    const name = options.reuse ?? `${options.prefix}_${process.pid}_${Date.now()}`;
    if (name === 'postgres') throw new Error('the benchmark never works in the `postgres` database itself');
    if (!options.reuse) await ensureDatabase(admin, name);
    return {
      url: withDatabase(serverUrl, name),
      name,
      description: `database ${name} on ${where} (${options.reuse ? 'reused' : options.keep ? 'kept afterwards' : 'dropped afterwards'})`,
      async close() {
        if (options.keep || options.reuse !== undefined) return;
        const client = new pg.Client({ connectionString: admin });
        await client.connect();
        try {
          await client.query(`drop database if exists ${client.escapeIdentifier(name)} with (force)`);
        } finally {
          await client.end();
        }
      },
    };
  }
  if (options.reuse) throw new Error('reusing a database needs a server: set DATABASE_URL (or run the machine Postgres)');
  const name = `${options.prefix}_${process.pid}_${Date.now()}`;
  const port = await freePort();
  chmodSync(workDir, 0o755); // the server runs as the postgres user when we are root
  let embedded: RunningPostgres | undefined = await startEmbeddedPostgres({
    dataDir: path.join(workDir, 'postgres'),
    port,
    database: name,
    persistent: false,
    log: createLogger('warn'),
  });
  return {
    url: embedded.url,
    name,
    description: `embedded Postgres on 127.0.0.1:${port} (temporary)`,
    async close() {
      const running = embedded;
      embedded = undefined;
      await running?.stop();
    },
  };
}
