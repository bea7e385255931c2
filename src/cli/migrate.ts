/** `make migrate`: applies pending migrations to DATABASE_URL, or to the embedded Postgres of DATA_DIR. */
import { loadDatabaseSettings } from '../config.ts';
import { createDatabase, migrateToLatest } from '../db/database.ts';
import { resolveDatabase } from '../db/resolve.ts';
import { createLogger } from '../logger.ts';

// Only the database's settings: migrations need no secret, mail server or payment processor.
const config = loadDatabaseSettings();
const log = createLogger(config.logLevel);
// The embedded Postgres `make run` is running, if it is (else one started for this).
const database = await resolveDatabase(config, log, { useRunning: true });
const db = createDatabase({ url: database.url, poolMax: 2, log });
try {
  const applied = await migrateToLatest(db);
  log.info({ migrations: applied }, applied.length ? 'migrations applied' : 'database is up to date');
} finally {
  await db.destroy();
  await database.stop();
}
