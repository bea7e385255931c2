import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { createDatabase, migrateToLatest } from '../../src/db/database.ts';
import { ensureDatabase, startEmbeddedPostgres } from '../../src/db/embedded-postgres.ts';
import { createJobQueue } from '../../src/jobs/queue.ts';
import { createLogger } from '../../src/logger.ts';
import { dropDatabase, withDatabase } from './database.ts';
import { freePort } from './net.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A migrated database (with pg-boss's schema) that test files copy their own database from. */
    templateDatabaseUrl: string;
  }
}

/**
 * One real Postgres for the whole run: the server of `DATABASE_URL` or else an embedded one in a
 * temporary directory. Migrations run once, into a template database; each test file works in its
 * own copy of it (see database.ts), so files run in parallel without seeing each other's rows or jobs.
 */
export default async function setup(project: TestProject) {
  const log = createLogger('warn');
  const template = `mds_test_${process.pid}_${Date.now()}`;
  let serverUrl: string;
  let teardown: () => Promise<void>;

  if (process.env.DATABASE_URL) {
    serverUrl = process.env.DATABASE_URL;
    teardown = () => dropDatabase(serverUrl, template);
  } else {
    const dataDir = await mkdtemp(path.join(tmpdir(), 'mds-test-pg-'));
    await chmod(dataDir, 0o755); // the server may run as the postgres user
    const embedded = await startEmbeddedPostgres({ dataDir: path.join(dataDir, 'data'), port: await freePort(), database: 'postgres', persistent: false, log });
    serverUrl = embedded.url;
    teardown = async () => {
      await embedded.stop();
      await rm(dataDir, { recursive: true, force: true });
    };
  }

  const templateUrl = withDatabase(serverUrl, template);
  await ensureDatabase(withDatabase(serverUrl, 'postgres'), template);
  const db = createDatabase({ url: templateUrl, poolMax: 2 });
  try {
    await migrateToLatest(db);
  } finally {
    await db.destroy();
  }
  const boss = createJobQueue({ url: templateUrl, work: false, log });
  await boss.start();
  await boss.stop({ graceful: false, close: true });

  project.provide('templateDatabaseUrl', templateUrl);
  return teardown;
}
