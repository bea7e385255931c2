import path from 'node:path';
import { fileURLToPath } from 'node:url';
import knex, { type Knex } from 'knex';
import type { Logger } from 'pino';
import { PreparingPostgresClient } from './prepared-client.ts';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations', import.meta.url));

export interface DatabaseOptions {
  url: string;
  poolMax: number;
  /** How long a query may wait for a pooled connection before failing. */
  acquireTimeoutMs?: number;
  /** Where knex's own warnings go (instead of the console). */
  log?: Logger;
  /** `false`: commits return before the WAL reaches the disk (Postgres `synchronous_commit = off`). */
  synchronousCommit?: boolean;
}

/** A knex instance on Postgres; objection's models run on it when a query names it (`Model.query(db)`). */
export function createDatabase(options: DatabaseOptions): Knex {
  const db = knex({
    // Reads sent as prepared statements, each planned once per connection (prepared-client.ts).
    client: PreparingPostgresClient,
    connection: {
      connectionString: options.url,
      application_name: 'model-deployment-service',
      ...(options.synchronousCommit === false ? { options: '-c synchronous_commit=off' } : {}),
    },
    pool: { min: 0, max: options.poolMax },
    acquireConnectionTimeout: options.acquireTimeoutMs ?? 5_000,
    migrations: { directory: MIGRATIONS_DIR, loadExtensions: ['.ts'], tableName: 'knex_migrations' },
    log: {
      warn: (message: unknown) => options.log?.warn({ knex: message }, 'database warning'),
      error: (message: unknown) => options.log?.error({ knex: message }, 'database error'),
      deprecate: (message: unknown) => options.log?.warn({ knex: message }, 'database deprecation'),
      debug: (message: unknown) => options.log?.debug({ knex: message }, 'database debug'),
    },
  });
  return db;
}

/** Applies every pending migration; safe to call from many processes at once (knex takes a lock). */
export async function migrateToLatest(db: Knex): Promise<string[]> {
  const [, applied] = (await db.migrate.latest()) as [number, string[]];
  return applied.map((file) => path.basename(file));
}

/** True when the database answers a trivial query within the timeout. */
export async function databaseAnswers(db: Knex, timeoutMs = 2_000): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
  });
  try {
    return await Promise.race([db.raw('select 1').then(() => true), timeout]);
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}
