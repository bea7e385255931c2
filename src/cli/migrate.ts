/** `make migrate`: applies pending migrations to DATABASE_URL, or to the embedded Postgres. */
import { loadConfig } from '../config.ts';
import { createDatabase, migrateToLatest } from '../db/database.ts';
import { resolveDatabase } from '../db/resolve.ts';
import { createLogger } from '../logger.ts';

const config = loadConfig();
const log = createLogger(config.logLevel);
const database = await resolveDatabase(config, log);
const db = createDatabase({ url: database.url, poolMax: 2, log });
try {
  const applied = await migrateToLatest(db);
  log.info({ migrations: applied }, applied.length ? 'migrations applied' : 'database is up to date');
} finally {
  await db.destroy();
  await database.stop();
}
