import { loadConfig } from '../src/config.ts';
import { resolveDatabase } from '../src/db/resolve.ts';
import { printBanner, runEntry } from '../src/entry.ts';
import { launchHostedModels } from '../src/hosted/hosted-launch.ts';
import { startRuntime } from '../src/runtime.ts';
import { loadDevConfig } from './config.ts';
import { LOCAL_CLUSTER_NAME, LOCAL_HOSTED_CLUSTER_NAME, registerLocalCluster, startLocalSimulators } from './local-cluster.ts';
import { startLocalStripe, withLocalStripe } from './local-stripe.ts';
import { startMailDev } from './maildev.ts';
import { localWebApp } from './web-app/web-app.ts';

/**
 * `make run`: the service as src/main.ts starts it, with a local stand-in for each outside part
 * whose settings are missing (the embedded Postgres, MailDev, the Stripe emulator, the GPU cluster
 * simulators, the web app's landing pages); a real part is used as soon as its variables are set.
 * Everything is registered in one lifecycle as it starts, so SIGTERM/SIGINT stop it in reverse order.
 */
await runEntry(
  (env) => {
    const config = loadConfig(env);
    return { config, dev: loadDevConfig(config, env) };
  },
  async ({ config: settings, dev }, log, lifecycle) => {
    let config = settings;
    const database = await lifecycle.start('database', () => resolveDatabase(config, log), (resolved) => resolved.stop());

    let smtpUrl = config.smtpUrl;
    let inbox: string | undefined;
    if (!smtpUrl) {
      log.info('SMTP_URL is not set: starting MailDev (local stand-in)');
      const maildev = await lifecycle.start('MailDev', () => startMailDev({ ...dev.maildev, log }), (started) => started.stop());
      smtpUrl = maildev.smtpUrl;
      inbox = maildev.webUrl;
    }

    // The stand-ins are started before the runtime so that they stop after it (in-flight requests and jobs still reach them).
    const stripeEmulator = dev.stripeEmulator.enabled
      ? await lifecycle.start('Stripe emulator', () => startLocalStripe(config, dev.stripeEmulator.port, log), (started) => started.stop())
      : undefined;
    if (stripeEmulator) config = withLocalStripe(config, stripeEmulator);

    // Two simulators: dedicated deployments on one, the hosted models on a worker of their own.
    const simulators =
      dev.clusterSimulator.enabled && config.role !== 'api'
        ? await lifecycle.start(
            'cluster simulators',
            () => startLocalSimulators({ log, ...dev.clusterSimulator }),
            async (started) => {
              await Promise.all([started.dedicated.stop(), started.hosted.stop()]);
            },
          )
        : undefined;

    // The links of emails and of Checkout point at this service when no web app is configured: pages of a stand-in answer them.
    const localPages = dev.localWebApp && config.role !== 'worker' ? localWebApp() : undefined;
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
      printBanner(config, runtime, [
        ['Database', database.description],
        ['Email', inbox ? `MailDev (local stand-in) inbox at ${inbox}` : 'SMTP_URL'],
        ['Payments', stripeEmulator ? `Stripe emulator (local stand-in) at ${stripeEmulator.url}` : config.stripe.secretKey ? 'Stripe (STRIPE_SECRET_KEY)' : 'none configured'],
        // The local stand-in's own key, new each start (not a Stripe key): its API and /_emulator/advance_time take it.
        ...(stripeEmulator ? [['Stripe key', `${stripeEmulator.secretKey} (the emulator's: Authorization: Bearer … for its API and /_emulator/advance_time)`] as [string, string]] : []),
        ['GPU cluster', simulators ? `simulator (local stand-in) at ${simulators.dedicated.url}, registered as ${LOCAL_CLUSTER_NAME}` : 'registered clusters'],
        ...(simulators ? [['Hosted models', `simulator (local stand-in) at ${simulators.hosted.url}, registered as ${LOCAL_HOSTED_CLUSTER_NAME}`] as [string, string]] : []),
      ]);
    }
    log.info({ role: config.role, port: runtime.port }, 'started');
  },
);
