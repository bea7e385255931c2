import path from 'node:path';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import { embeddedPostgresUrl, runningEmbeddedPostgres, startEmbeddedPostgres } from './embedded-postgres.ts';

export interface ResolvedDatabase {
  url: string;
  /** Human description for start-up output. */
  description: string;
  /** Stops what was started here (the embedded server); a no-op for `DATABASE_URL` or a server found running. */
  stop(): Promise<void>;
}

/** The database of the embedded Postgres (one per cluster, under `DATA_DIR`). */
const EMBEDDED_DATABASE = 'model_deployment';

/**
 * `DATABASE_URL` when set; otherwise the embedded Postgres, started with data under `DATA_DIR`.
 *
 * The embedded server of `DATA_DIR` may already run, started by the service of `make run`: with
 * `useRunning` (the operator CLI, `make migrate`) its database is used, on the port it listens on,
 * and left running; otherwise (a second service on the same data) start-up fails saying so.
 */
export async function resolveDatabase(config: Pick<Config, 'databaseUrl' | 'dataDir' | 'embeddedPgPort'>, log: Logger, options: { useRunning?: boolean } = {}): Promise<ResolvedDatabase> {
  if (config.databaseUrl) {
    return { url: config.databaseUrl, description: 'DATABASE_URL', stop: async () => {} };
  }
  const dataDir = path.join(config.dataDir, 'postgres');
  const running = await runningEmbeddedPostgres(dataDir);
  if (running && options.useRunning) {
    if (!running.ready) throw new Error(`The embedded Postgres of ${dataDir} (pid ${running.pid}) is starting or stopping: try again in a moment`);
    return {
      url: embeddedPostgresUrl(running.port, EMBEDDED_DATABASE),
      description: `the embedded Postgres already running on 127.0.0.1:${running.port} (pid ${running.pid}), data in ${dataDir}`,
      stop: async () => {},
    };
  }
  if (running) {
    throw new Error(
      `The embedded Postgres of DATA_DIR (${dataDir}) is already running (pid ${running.pid}, 127.0.0.1:${running.port}), ` +
        `most likely under another \`make run\`: stop that one, or set DATA_DIR (and the ports) for this one. ` +
        `A server left behind by a process that was killed stops with \`kill -INT ${running.pid}\`.`,
    );
  }
  log.info('DATABASE_URL is not set: starting the embedded Postgres (local stand-in)');
  const embedded = await startEmbeddedPostgres({
    dataDir,
    port: config.embeddedPgPort,
    database: EMBEDDED_DATABASE,
    persistent: true,
    log,
  });
  return {
    url: embedded.url,
    description: `embedded Postgres (local stand-in) on 127.0.0.1:${config.embeddedPgPort}, data in ${dataDir}`,
    stop: embedded.stop,
  };
}
