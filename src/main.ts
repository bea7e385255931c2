import type { Logger } from 'pino';
import { ConfigError, loadConfig, type Config } from './config.ts';
import { resolveDatabase } from './db/resolve.ts';
import { Lifecycle } from './lifecycle.ts';
import { launchHostedModels } from './hosted/hosted-launch.ts';
import { LOCAL_CLUSTER_NAME, LOCAL_HOSTED_CLUSTER_NAME, registerLocalCluster, startLocalSimulators } from './local/local-cluster.ts';
import { startLocalStripe, withLocalStripe } from './local/local-stripe.ts';
import { startMailDev } from './local/maildev.ts';
import { localWebApp } from './local/web-app/web-app.ts';
import { createLogger } from './logger.ts';
import { startRuntime } from './runtime.ts';

/**
 * Composition root: the database, the local stand-ins, the runtime, each registered in one
 * lifecycle as it starts; SIGTERM/SIGINT (also during start-up) stop them in reverse order.
 */
async function start(settings: Config, log: Logger, lifecycle: Lifecycle): Promise<void> {
  let config = settings;
  const database = await lifecycle.start('database', () => resolveDatabase(config, log), (resolved) => resolved.stop());

  let smtpUrl = config.smtpUrl;
  let inbox: string | undefined;
  if (!smtpUrl) {
    log.info('SMTP_URL is not set: starting MailDev (local stand-in)');
    const maildev = await lifecycle.start('MailDev', () => startMailDev({ ...config.maildev, log }), (started) => started.stop());
    smtpUrl = maildev.smtpUrl;
    inbox = maildev.webUrl;
  }

  // The stand-ins are started before the runtime so that they stop after it (in-flight requests and jobs still reach them).
  const stripeEmulator = config.stripe.emulator.enabled
    ? await lifecycle.start('Stripe emulator', () => startLocalStripe(config, log), (started) => started.stop())
    : undefined;
  if (stripeEmulator) config = withLocalStripe(config, stripeEmulator);

  // Two simulators: dedicated deployments on one, the hosted models on a worker of their own.
  const simulators =
    config.clusterSimulator.enabled && config.role !== 'api'
      ? await lifecycle.start(
          'cluster simulators',
          () => startLocalSimulators({ log, ...config.clusterSimulator }),
          async (started) => {
            await Promise.all([started.dedicated.stop(), started.hosted.stop()]);
          },
        )
      : undefined;

  // The links of emails and of Checkout point at this service when no web app is configured: pages of a stand-in answer them.
  const localPages = config.localWebApp && config.role !== 'worker' ? localWebApp() : undefined;
  if (localPages) log.info('serving the local stand-in for the web app (LOCAL_WEB_APP): /verify-email, /reset-password, /invitations/{token}, /settings/billing');
  const runtime = await startRuntime({ config, log, databaseUrl: database.url, smtpUrl, lifecycle, localPages });
  if (simulators) {
    await registerLocalCluster(runtime.container.clusters, simulators.dedicated, log, simulators.hosted);
    // The catalog's hosted models load in the background, as an operator's `hosted launch` would.
    void launchHostedModels({ db: runtime.container.db, clusters: runtime.container.clusters }).then(
      (outcomes) => log.info({ hosted_models: outcomes }, 'hosted models launched on the GPU cluster simulator'),
      (error: unknown) => log.error({ err: error }, 'hosted models could not be launched on the GPU cluster simulator'),
    );
  }

  if (runtime.server) {
    const base = config.publicUrl;
    process.stdout.write(
      [
        '',
        `  API           ${base}`,
        `  Health        ${base}/healthz`,
        `  Swagger UI    ${base}/docs`,
        `  ReDoc         ${base}/redoc`,
        `  OpenAPI       ${base}/openapi.json`,
        ...(config.metrics && runtime.metricsPort !== undefined ? [`  Metrics       ${listenerUrl(config.metrics.host, runtime.metricsPort)}/metrics`] : []),
        `  Database      ${database.description}`,
        `  Email         ${inbox ? `MailDev (local stand-in) inbox at ${inbox}` : 'SMTP_URL'}`,
        `  Payments      ${stripeEmulator ? `Stripe emulator (local stand-in) at ${stripeEmulator.url}` : config.stripe.secretKey ? 'Stripe (STRIPE_SECRET_KEY)' : 'none configured'}`,
        // The local stand-in's own key, new each start (not a Stripe key): its API and /_emulator/advance_time take it.
        ...(stripeEmulator ? [`  Stripe key    ${stripeEmulator.secretKey} (the emulator's: Authorization: Bearer … for its API and /_emulator/advance_time)`] : []),
        `  GPU cluster   ${simulators ? `simulator (local stand-in) at ${simulators.dedicated.url}, registered as ${LOCAL_CLUSTER_NAME}` : 'registered clusters'}`,
        ...(simulators ? [`  Hosted models simulator (local stand-in) at ${simulators.hosted.url}, registered as ${LOCAL_HOSTED_CLUSTER_NAME}`] : []),
        '',
        '',
      ].join('\n'),
    );
  }
  log.info({ role: config.role, port: runtime.port }, 'started');
}

/** `http://host:port` of a listener on `host` (one on every address is reached through loopback). */
function listenerUrl(host: string, port: number): string {
  const reachable = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
  return `http://${reachable.includes(':') ? `[${reachable}]` : reachable}:${port}`;
}

let config: Config;
try {
  config = loadConfig();
} catch (error) {
  process.stderr.write(`${error instanceof ConfigError ? error.message : `Start-up failed: ${String(error)}`}\n`);
  process.exit(1);
}
const log = createLogger(config.logLevel);
const lifecycle = new Lifecycle(log);
let signalled = false;
const shutdown = async (signal: string) => {
  if (signalled) return;
  signalled = true;
  log.info({ signal }, 'shutting down: finishing in-flight requests and jobs');
  await lifecycle.stop();
  log.info('stopped');
  process.exit(0);
};
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));

try {
  await start(config, log, lifecycle);
} catch (error) {
  // After a signal, start-up fails because its parts are being stopped: the shutdown ends the process.
  if (!signalled) {
    log.debug({ err: error }, 'start-up failed');
    await lifecycle.stop();
    process.stderr.write(`Start-up failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  }
}
