import type { Server } from 'node:http';
import type { Logger } from 'pino';
import { createApp } from './app.ts';
import type { Config } from './config.ts';
import { createContainer, jobDefinitions, securityHandlers, type Container } from './container.ts';
import { createDatabase, migrateToLatest } from './db/database.ts';
import { buildHandlers } from './http/handlers.ts';
import { closeServer, listen } from './http/server.ts';
import { createJobQueue, startJobQueue, stopJobQueue } from './jobs/queue.ts';
import { startReconciler } from './deployments/provisioning.ts';
import { loadOpenApiDocument } from './openapi-document.ts';

export interface ServiceOptions {
  config: Config;
  log: Logger;
  databaseUrl: string;
  smtpUrl: string;
  /** Called with each stop step as soon as the part it stops has started (so a signal during start-up stops it). */
  onStarted?: (stop: () => Promise<void>) => void;
}

export interface RunningService {
  container: Container;
  server: Server | undefined;
  /** The port the API listens on (the real one when PORT is 0). */
  port: number | undefined;
  /** Stops HTTP (finishing in-flight requests), then jobs (finishing running ones), then the pool. */
  stop(): Promise<void>;
}

/**
 * The service as `ROLE` asks: migrations, the job queue (consuming in `worker` and `all`), and the
 * HTTP API (in `api` and `all`). Used by `main.ts` and by the tests alike.
 */
export async function startService(options: ServiceOptions): Promise<RunningService> {
  const { config, log } = options;
  const stops: Array<() => Promise<void>> = [];
  const started = (stop: () => Promise<void>) => {
    stops.unshift(stop);
    options.onStarted?.(stop);
  };

  const db = createDatabase({ url: options.databaseUrl, poolMax: config.databasePoolMax, log });
  started(() => db.destroy());
  const applied = await migrateToLatest(db);
  if (applied.length) log.info({ migrations: applied }, 'migrations applied');

  const work = config.role !== 'api';
  const boss = createJobQueue({ url: options.databaseUrl, work, log });
  const document = loadOpenApiDocument();
  const container = createContainer({ config, log, db, boss, document, smtpUrl: options.smtpUrl });
  started(async () => container.mailer.close());
  await startJobQueue(boss, { work, jobs: jobDefinitions(container), log });
  started(() => stopJobQueue(boss, config.shutdownTimeoutMs));
  if (work) await startReconciler(boss);

  let server: Server | undefined;
  let port: number | undefined;
  if (config.role !== 'worker') {
    const app = await createApp({
      logger: log,
      document,
      handlers: buildHandlers(container),
      security: securityHandlers(container),
      allowedOrigins: config.allowedOrigins,
      trustProxy: config.trustProxy,
      validateResponses: config.responseValidation,
      hsts: config.env === 'production',
    });
    container.usage.start();
    started(() => container.usage.stop());
    const listening = await listen(app, config.port, config.host);
    server = listening;
    const address = listening.address();
    port = typeof address === 'object' && address ? address.port : config.port;
    started(() => closeServer(listening, config.shutdownTimeoutMs));
  }

  return {
    container,
    server,
    port,
    stop: async () => {
      for (const stop of stops) {
        try {
          await stop();
        } catch (error) {
          log.error({ err: error }, 'error while stopping');
        }
      }
    },
  };
}
