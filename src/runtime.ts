import type { Server } from 'node:http';
import type { RequestHandler } from 'express';
import type { Logger } from 'pino';
import { ALL_KEYS } from './api-keys/api-keys.service.ts';
import { createApp } from './app.ts';
import type { Config } from './config.ts';
import { createContainer, jobDefinitions, securityHandlers, type Container } from './container.ts';
import { createDatabase, migrateToLatest } from './db/database.ts';
import { buildHandlers } from './handlers.ts';
import { closeServer, listen } from './http/server.ts';
import { CHANGE_CHANNELS, ChangeListener } from './db/change-listener.ts';
import { createJobQueue, startJobQueue, stopJobQueue } from './jobs/queue.ts';
import { startReconciler } from './deployments/provisioning.ts';
import { startAutoscaler } from './deployments/scaling.ts';
import { Lifecycle } from './lifecycle.ts';
import { defaultUsageJournalDir } from './inference/usage-journal.ts';
import { loadOpenApiDocument } from './openapi-document.ts';
import { portOf, startMetricsServer } from './metrics/metrics-server.ts';

export interface RuntimeOptions {
  config: Config;
  log: Logger;
  databaseUrl: string;
  smtpUrl: string;
  /**
   * The process's lifecycle: the runtime's parts stop at this point of it, and a signal during
   * start-up stops those already started. Without one, `stop()` of the runtime is the only way.
   */
  lifecycle?: Lifecycle;
  /** Pages of a local stand-in the API answers before its routes (createApp's `localPages`): passed by dev/main.ts only. */
  localPages?: RequestHandler | undefined;
}

export interface Runtime {
  container: Container;
  server: Server | undefined;
  /** The port the API listens on (the real one when PORT is 0). */
  port: number | undefined;
  /** The port of the metrics listener (the real one when METRICS_PORT is 0); undefined when METRICS_PORT is unset. */
  metricsPort: number | undefined;
  /** Stops HTTP (finishing in-flight requests), then usage records, jobs (finishing running ones), the mailer, the pool. */
  stop(): Promise<void>;
}

/**
 * The runtime as `ROLE` asks: the pool and migrations, the job queue (consuming in `worker` and
 * `all`), and the HTTP API (in `api` and `all`). Used by src/main.ts, dev/main.ts and the tests alike.
 */
export async function startRuntime(options: RuntimeOptions): Promise<Runtime> {
  const { config, log } = options;
  const lifecycle = options.lifecycle ? await options.lifecycle.child('runtime') : new Lifecycle(log);

  const db = createDatabase({ url: options.databaseUrl, poolMax: config.databasePoolMax, log });
  await lifecycle.started('database pool', () => db.destroy());
  if (config.migrateOnStart) {
    const applied = await migrateToLatest(db);
    if (applied.length) log.info({ migrations: applied }, 'migrations applied');
  } else {
    // Run once per rollout by the migrations (`node dist/cli/migrate.js`, the Kubernetes Job).
    const [, pending] = (await db.migrate.list()) as [unknown, { file: string }[]];
    if (pending.length) log.warn({ migrations: pending.map((migration) => migration.file) }, 'migrations pending, not applied (MIGRATE_ON_START is off)');
  }

  const work = config.role !== 'api';
  const boss = createJobQueue({ url: options.databaseUrl, work, log });
  const document = loadOpenApiDocument();
  // Usage records are journaled before an answer's last bytes (or, without a journal, committed
  // then: the group commit), and written on a pool of their own whose commits do not wait for the
  // disk (see insertUsageRecords).
  const usageDb = createDatabase({ url: options.databaseUrl, poolMax: 2, log, synchronousCommit: false });
  await lifecycle.started('usage database pool', () => usageDb.destroy());
  const usageJournalDir = config.usageJournalDir === 'off' ? undefined : (config.usageJournalDir ?? defaultUsageJournalDir(options.databaseUrl));
  const container = createContainer({ config, log, db, boss, document, smtpUrl: options.smtpUrl, usageDb, usageJournalDir });
  await lifecycle.started('mailer', () => container.mailer.close());
  await lifecycle.start(
    'job queue',
    () => startJobQueue(boss, { work, jobs: jobDefinitions(container), log, metrics: container.metrics }),
    () => stopJobQueue(boss, config.shutdownTimeoutMs),
  );
  if (work) await startReconciler(boss);
  if (work) await startAutoscaler(boss);
  // Deployments by status are the same from every process: the workers report them.
  if (work) container.metrics?.watchDeployments(db);

  // One LISTEN connection per process: changes made by other processes (a key revoked there, a
  // deployment event) reach this one's caches, event streams and webhook dispatcher at once.
  const api = config.role !== 'worker';
  const changes = new ChangeListener(options.databaseUrl, log);
  if (api) {
    changes.subscribe(CHANGE_CHANNELS.apiKey, {
      changed: (keyId) => (keyId === ALL_KEYS ? container.apiKeys.forgetAll() : container.apiKeys.forget(Number(keyId))),
      resync: () => container.apiKeys.forgetAll(),
    });
    changes.subscribe(CHANGE_CHANNELS.deploymentEvent, { changed: (deploymentId) => container.eventStreams.notify(deploymentId), resync: () => container.eventStreams.resync() });
    // A session or membership that ended ends the streams opened with it.
    changes.subscribe(CHANGE_CHANNELS.accessChanged, {
      changed: (userId) => container.eventStreams.accessChanged(Number(userId)),
      resync: () => container.eventStreams.recheckAll(),
    });
    // A cluster whose engine refused its credentials in another process is not called from this one either.
    changes.subscribe(CHANGE_CHANNELS.cluster, { changed: (payload) => container.router.clusterChanged(payload), resync: () => container.router.forgetAll() });
    // A replica that became ready releases the requests held for it; one that drains gets no new request.
    changes.subscribe(CHANGE_CHANNELS.replicas, { changed: (deploymentId) => container.router.replicasChanged(deploymentId), resync: () => container.router.forgetAll() });
  }
  if (work) {
    const dispatcher = container.webhookDispatcher;
    changes.subscribe(CHANGE_CHANNELS.deploymentEvent, { changed: () => dispatcher.wake(), resync: () => dispatcher.wake() });
  }
  await lifecycle.start('change listener', () => changes.start(), () => changes.stop());
  if (work) {
    container.webhookDispatcher.start();
    await lifecycle.started('webhook dispatcher', () => container.webhookDispatcher.stop());
  }

  let server: Server | undefined;
  if (api) {
    const app = await createApp({
      logger: log,
      document,
      handlers: buildHandlers(container),
      security: securityHandlers(container),
      allowedOrigins: config.allowedOrigins,
      trustProxy: config.trustProxy,
      validateResponses: config.responseValidation,
      hsts: config.env === 'production',
      metrics: container.metrics,
      localPages: options.localPages,
      requestMetrics: container.requestMetrics,
    });
    await container.usage.start();
    await lifecycle.started('usage records', () => container.usage.stop());
    await lifecycle.started('key limit shares', () => container.keyLimiter.stop());
    container.deploymentLoad.start();
    await lifecycle.started('deployment load reports', () => container.deploymentLoad.stop());
    container.requestMetrics.start();
    await lifecycle.started('request metrics', () => container.requestMetrics.stop());
    server = await lifecycle.start('HTTP server', () => listen(app, config.port, config.host), (listening) => closeServer(listening, config.shutdownTimeoutMs));
    // Released before the server closes: requests held for a cold start are routed anew (a 503 if still at zero).
    await lifecycle.started('cold-start holds', async () => container.coldStarts.releaseAll());
    // Stopped before the server closes: open event streams would hold it until its timeout.
    await lifecycle.started('deployment event streams', () => container.eventStreams.closeAll());
    // Stopped first: /readyz answers 503 for the drain time while requests are still served, so a
    // load balancer takes the process out of rotation before its server closes.
    await lifecycle.started('readiness', async () => {
      container.readiness.drain();
      if (config.shutdownDrainMs > 0) await new Promise((resolve) => setTimeout(resolve, config.shutdownDrainMs));
    });
  }
  const address = server?.address();

  // Last to start, first to stop: a scrape never finds the parts it reads stopped.
  const { metrics } = container;
  const listener = config.metrics;
  const metricsServer =
    metrics && listener
      ? await lifecycle.start(
          'metrics listener',
          () => startMetricsServer(metrics, { ...listener, log }),
          (listening) => closeServer(listening, config.shutdownTimeoutMs),
        )
      : undefined;
  if (metricsServer) log.info({ host: listener?.host, port: portOf(metricsServer) }, 'metrics listening');

  return {
    container,
    server,
    port: typeof address === 'object' && address ? address.port : server ? config.port : undefined,
    metricsPort: metricsServer ? portOf(metricsServer) : undefined,
    stop: () => lifecycle.stop(),
  };
}
