import { ConfigError } from './config.ts';
import { resolveDatabase } from './db/resolve.ts';
import { printBanner, readConfig, runEntry } from './entry.ts';
import { startRuntime } from './runtime.ts';

/**
 * The production entry (`npm start`, the image's CMD): the database, then the runtime, each
 * registered in one lifecycle as it starts. Every outside part comes from the settings; the local
 * stand-ins `make run` starts in place of missing ones live in `dev/main.ts`, never in this tree.
 */
await runEntry(
  (env) => {
    const { config } = readConfig(env);
    // Production requires it already; outside production only `make run` has MailDev to stand in.
    if (!config.smtpUrl) throw new ConfigError('Invalid configuration:\n  SMTP_URL: required (`make run` starts MailDev in its place)');
    return { config, smtpUrl: config.smtpUrl };
  },
  async ({ config, smtpUrl }, log, lifecycle) => {
    const database = await lifecycle.start('database', () => resolveDatabase(config, log), (resolved) => resolved.stop());
    const runtime = await startRuntime({ config, log, databaseUrl: database.url, smtpUrl, lifecycle });
    if (runtime.server) {
      printBanner(config, runtime, [
        ['Database', database.description],
        ['Email', 'SMTP_URL'],
        ['Payments', config.stripe.secretKey ? 'Stripe (STRIPE_SECRET_KEY)' : 'none configured'],
        ['GPU cluster', 'registered clusters'],
      ]);
    }
    log.info({ role: config.role, port: runtime.port }, 'started');
  },
);
