import path from 'node:path';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import { startEmbeddedPostgres } from './embedded-postgres.ts';

export interface ResolvedDatabase {
  url: string;
  /** Human description for start-up output. */
  description: string;
  /** Stops what was started here (the embedded server); a no-op for `DATABASE_URL`. */
  stop(): Promise<void>;
}

/** `DATABASE_URL` when set; otherwise the embedded Postgres, started with data under `DATA_DIR`. */
export async function resolveDatabase(config: Config, log: Logger): Promise<ResolvedDatabase> {
  if (config.databaseUrl) {
    return { url: config.databaseUrl, description: 'DATABASE_URL', stop: async () => {} };
  }
  log.info('DATABASE_URL is not set: starting the embedded Postgres (local stand-in)');
  const embedded = await startEmbeddedPostgres({
    dataDir: path.join(config.dataDir, 'postgres'),
    port: config.embeddedPgPort,
    database: 'model_deployment',
    persistent: true,
    log,
  });
  return {
    url: embedded.url,
    description: `embedded Postgres (local stand-in) on 127.0.0.1:${config.embeddedPgPort}, data in ${path.join(config.dataDir, 'postgres')}`,
    stop: embedded.stop,
  };
}
