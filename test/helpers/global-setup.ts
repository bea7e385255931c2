import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { createDatabase, migrateToLatest } from '../../src/db/database.ts';
import { ensureDatabase, startEmbeddedPostgres } from '../../src/db/embedded-postgres.ts';
import { createLogger } from '../../src/logger.ts';
import { freePort } from './net.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

/**
 * One real Postgres for the whole run: the server of `DATABASE_URL` (a fresh database on it, dropped
 * afterwards) or else an embedded one in a temporary directory. Migrations run once, here.
 */
export default async function setup(project: TestProject) {
  const log = createLogger('warn');
  const database = `mds_test_${process.pid}_${Date.now()}`;
  let url: string;
  let teardown: () => Promise<void>;

  if (process.env.DATABASE_URL) {
    const admin = new URL(process.env.DATABASE_URL);
    admin.pathname = '/postgres';
    await ensureDatabase(admin.toString(), database);
    const target = new URL(process.env.DATABASE_URL);
    target.pathname = `/${database}`;
    url = target.toString();
    teardown = () => dropDatabase(admin.toString(), database);
  } else {
    const dataDir = await mkdtemp(path.join(tmpdir(), 'mds-test-pg-'));
    await chmod(dataDir, 0o755); // the server may run as the postgres user
    const embedded = await startEmbeddedPostgres({
      dataDir: path.join(dataDir, 'data'),
      port: await freePort(),
      database,
      persistent: false,
      log,
    });
    url = embedded.url;
    teardown = async () => {
      await embedded.stop();
      await rm(dataDir, { recursive: true, force: true });
    };
  }

  const db = createDatabase({ url, poolMax: 2 });
  try {
    await migrateToLatest(db);
  } finally {
    await db.destroy();
  }
  project.provide('databaseUrl', url);
  return teardown;
}

async function dropDatabase(adminUrl: string, database: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(`drop database if exists ${client.escapeIdentifier(database)} with (force)`);
  } finally {
    await client.end();
  }
}
