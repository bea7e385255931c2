import { ConfigError, loadConfig, type Config } from './config.ts';
import { resolveDatabase } from './db/resolve.ts';
import { LOCAL_CLUSTER_NAME, startLocalCluster } from './local/local-cluster.ts';
import { startMailDev } from './local/maildev.ts';
import { createLogger } from './logger.ts';
import { startService } from './service.ts';

/** Composition root: database, local stand-ins, the service; stops cleanly on SIGTERM/SIGINT. */
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
  stops.push(database.stop);

  let smtpUrl = config.smtpUrl;
  let inbox: string | undefined;
  if (!smtpUrl) {
    log.info('SMTP_URL is not set: starting MailDev (local stand-in)');
    const maildev = await startMailDev({ ...config.maildev, log });
    stops.unshift(maildev.stop);
    smtpUrl = maildev.smtpUrl;
    inbox = maildev.webUrl;
  }

  const service = await startService({ config, log, databaseUrl: database.url, smtpUrl, onStarted: (stop) => stops.unshift(stop) });

  let simulator: string | undefined;
  if (config.clusterSimulator.enabled && config.role !== 'api') {
    const cluster = await startLocalCluster({
      clusters: service.container.clusters,
      log,
      port: config.clusterSimulator.port,
      modelLoadMs: config.clusterSimulator.modelLoadMs,
    });
    stops.splice(stops.length - 2, 0, cluster.stop);
    simulator = cluster.url;
  }

  if (service.server) {
    const base = config.publicUrl;
    process.stdout.write(
      [
        '',
        `  API           ${base}`,
        `  Health        ${base}/healthz`,
        `  Swagger UI    ${base}/docs`,
        `  ReDoc         ${base}/redoc`,
        `  OpenAPI       ${base}/openapi.json`,
        `  Database      ${database.description}`,
        `  Email         ${inbox ? `MailDev (local stand-in) inbox at ${inbox}` : 'SMTP_URL'}`,
        `  GPU cluster   ${simulator ? `simulator (local stand-in) at ${simulator}, registered as ${LOCAL_CLUSTER_NAME}` : 'registered clusters'}`,
        '',
        '',
      ].join('\n'),
    );
  }
  log.info({ role: config.role, port: service.port }, 'started');
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
