import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { createDatabase } from '../../src/db/database.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { createTestDatabase } from '../helpers/database.ts';

/**
 * `MIGRATE_ON_START`: on by default, so `make run` and a single process migrate as
 * before; off in the Kubernetes manifests, where a Job migrates once before a rollout and replicas
 * never race for knex's migration lock.
 */

/** A copy of the migrated template with its latest migration rolled back, so one migration is pending. */
async function databaseWithOnePending(): Promise<{ url: string; drop(): Promise<void>; pending: string }> {
  const database = await createTestDatabase();
  const db = createDatabase({ url: database.url, poolMax: 1 });
  try {
    const [, rolledBack] = (await db.migrate.down()) as [number, string[]];
    expect(rolledBack).toHaveLength(1);
    return { ...database, pending: path.basename(rolledBack[0] ?? '') };
  } finally {
    await db.destroy();
  }
}

async function appliedMigrations(app: TestApp): Promise<string[]> {
  const rows = await app.db('knex_migrations').select<{ name: string }[]>('name');
  return rows.map((row) => row.name);
}

let app: TestApp | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
});

describe('MIGRATE_ON_START', () => {
  it('is on unless set, and off with false', () => {
    expect(loadConfig({ NODE_ENV: 'test' }).migrateOnStart).toBe(true);
    expect(loadConfig({ NODE_ENV: 'test', MIGRATE_ON_START: 'false' }).migrateOnStart).toBe(false);
    expect(() => loadConfig({ NODE_ENV: 'test', MIGRATE_ON_START: 'sometimes' })).toThrow(/MIGRATE_ON_START/);
  });

  it('applies a pending migration at start-up by default', async () => {
    const database = await databaseWithOnePending();
    app = await startTestApp({}, { database });
    expect(await appliedMigrations(app)).toContain(database.pending);
  });

  it('off, starts without applying a pending migration and logs it as pending', async () => {
    const database = await databaseWithOnePending();
    const logLines: string[] = [];
    app = await startTestApp({ MIGRATE_ON_START: 'false' }, { database, logLines });
    expect(await appliedMigrations(app)).not.toContain(database.pending);
    const warning = logLines.map((line) => JSON.parse(line) as { msg: string; migrations?: string[] }).find((line) => line.msg.startsWith('migrations pending'));
    expect(warning?.migrations).toEqual([database.pending]);
  });

  it('off, answers /readyz 503 until the migration job has applied the pending migration, then 200', async () => {
    const database = await databaseWithOnePending();
    app = await startTestApp({ MIGRATE_ON_START: 'false' }, { database });
    const ready = async () => {
      const response = await fetch(`${(app as TestApp).url}/readyz`);
      return { status: response.status, detail: ((await response.json()) as { detail?: string }).detail };
    };
    expect(await ready()).toEqual({ status: 503, detail: expect.stringContaining('Migrations of this version are not applied yet') });
    // Alive meanwhile: liveness does not restart a replica that waits for the Job.
    expect((await fetch(`${app.url}/healthz`)).status).toBe(200);
    await app.db.migrate.latest();
    expect(await ready()).toEqual({ status: 200, detail: undefined });
  });
});

describe('the migrations Job (`node dist/cli/migrate.js`)', () => {
  it('runs in production with only DATABASE_URL: no APP_SECRET, SMTP_URL or processor keys, which migrations never use', async () => {
    const database = await databaseWithOnePending();
    try {
      const env = { PATH: process.env.PATH ?? '', NODE_ENV: 'production', DATABASE_URL: database.url, LOG_LEVEL: 'info' };
      const { stdout } = await promisify(execFile)(process.execPath, [path.join(import.meta.dirname, '../../src/cli/migrate.ts')], { env });
      expect(stdout).toContain(database.pending);
      const db = createDatabase({ url: database.url, poolMax: 1 });
      try {
        expect(await db('knex_migrations').pluck('name')).toContain(database.pending);
      } finally {
        await db.destroy();
      }
    } finally {
      await database.drop();
    }
  });
});
