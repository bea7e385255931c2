import type { Server } from 'node:http';
import type { PgBoss } from 'pg-boss';
import { createApp } from './app.ts';
import { ConfigError, loadConfig, type Config } from './config.ts';
import { createDatabase, migrateToLatest } from './db/database.ts';
import { resolveDatabase } from './db/resolve.ts';
import { buildHandlers } from './http/handlers.ts';
import { authenticationNotBuilt } from './http/not-implemented.ts';
import { closeServer, listen } from './http/server.ts';
import { startJobQueue, stopJobQueue } from './jobs/queue.ts';
import { jobDefinitions } from './jobs/definitions.ts';
import { createLogger } from './logger.ts';
import { loadOpenApiDocument } from './openapi-document.ts';

/** Composition root: config, database, migrations, job queue, HTTP; stops cleanly on SIGTERM/SIGINT. */
async function main(config: Config): Promise<void> {
  const log = createLogger(config.logLevel);
  // Registered first, so a signal during start-up also stops whatever has started so far.
  const stops: Array<() => Promise<void>> = [];
  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutting down: finishing in-flight requests and jobs');
    for (const stop of stops) {
      try {
        await stop();
      } catch (error) {
        log.error({ err: error }, 'error while shutting down');
      }
    }
    log.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));

  const database = await resolveDatabase(config, log);
  const databaseUrl = database.url;
  stops.push(database.stop);

  const db = createDatabase({ url: databaseUrl, poolMax: config.databasePoolMax, log });
  stops.unshift(() => db.destroy());
  const applied = await migrateToLatest(db);
  if (applied.length) log.info({ migrations: applied }, 'migrations applied');

  const boss: PgBoss = await startJobQueue({ url: databaseUrl, work: config.role !== 'api', jobs: jobDefinitions(), log });
  stops.unshift(() => stopJobQueue(boss, config.shutdownTimeoutMs));

  let server: Server | undefined;
  if (config.role !== 'worker') {
    const document = loadOpenApiDocument();
    const app = await createApp({
      logger: log,
      document,
      handlers: buildHandlers({ db, document }),
      security: authenticationNotBuilt,
      validateResponses: config.responseValidation,
    });
    server = await listen(app, config.port, config.host);
    const address = server.address();
    const port = typeof address === 'object' && address ? address.port : config.port;
    const listening = server;
    stops.unshift(() => closeServer(listening, config.shutdownTimeoutMs));
    const base = config.publicUrl;
    log.info({ port, role: config.role }, 'listening');
    process.stdout.write(
      [
        '',
        `  API           ${base}`,
        `  Health        ${base}/healthz`,
        `  Swagger UI    ${base}/docs`,
        `  ReDoc         ${base}/redoc`,
        `  OpenAPI       ${base}/openapi.json`,
        `  Database      ${database.description}`,
        '',
        '',
      ].join('\n'),
    );
  } else {
    log.info('worker started');
  }

}

try {
  await main(loadConfig());
} catch (error) {
  if (error instanceof ConfigError) {
    process.stderr.write(`${error.message}\n`);
  } else {
    process.stderr.write(`Start-up failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  }
  process.exit(1);
}
