import { z } from 'zod';
import { booleanFlag, ConfigError, parseEnvironment, type Config } from '../src/config.ts';

/**
 * The settings of the local stand-ins `make run` (dev/main.ts) starts in place of missing parts:
 * MailDev, the Stripe emulator, the GPU cluster simulators and the web app's landing pages. The
 * production service never reads them (src/config.ts has its own); their defaults follow the
 * service's settings, so a real part is used instead as soon as its variables are set.
 */
const schema = z.object({
  MAILDEV_SMTP_PORT: z.coerce.number().int().min(1).max(65535).default(1025),
  MAILDEV_WEB_PORT: z.coerce.number().int().min(1).max(65535).default(1080),
  STRIPE_EMULATOR: booleanFlag.optional(),
  STRIPE_EMULATOR_PORT: z.coerce.number().int().min(0).max(65535).default(12111),
  CLUSTER_SIMULATOR: booleanFlag.optional(),
  CLUSTER_SIMULATOR_PORT: z.coerce.number().int().min(0).max(65535).default(9997),
  CLUSTER_SIMULATOR_HOSTED_PORT: z.coerce.number().int().min(0).max(65535).default(9996),
  CLUSTER_SIMULATOR_MODEL_LOAD_MS: z.coerce.number().int().min(0).default(3000),
  LOCAL_WEB_APP: booleanFlag.optional(),
});

/** The schema of the stand-ins' settings, for docs/configuration.md (scripts/config-table.ts). */
export const devConfigSchema = schema;

/** The variables read here (and by nothing in src/). */
export const DEV_SETTINGS = Object.keys(schema.shape) as Array<keyof typeof schema.shape>;

export interface DevConfig {
  /** MailDev's ports, when `SMTP_URL` is unset. */
  maildev: { smtpPort: number; webPort: number };
  /** The Stripe emulator: by default in development when `STRIPE_SECRET_KEY` is unset. */
  stripeEmulator: { enabled: boolean; port: number };
  /**
   * The GPU cluster simulators, by default in development: `port` serves dedicated deployments,
   * `hostedPort` the hosted models (a simulator of their own).
   */
  clusterSimulator: { enabled: boolean; port: number; hostedPort: number; modelLoadMs: number };
  /**
   * Serve the local stand-in for the web app (dev/web-app/): minimal pages at the landings of the
   * emails' and Checkout's links (`/verify-email`, `/reset-password`, `/invitations/{token}`,
   * `/settings/billing`). `LOCAL_WEB_APP`; by default on exactly when NODE_ENV is development and
   * WEB_APP_URL is unset (the links then point at this service); never in production.
   */
  localWebApp: boolean;
}

/** The stand-ins' settings of `env`, beside the service's `config` read from the same environment. */
export function loadDevConfig(config: Config, env: NodeJS.ProcessEnv = process.env): DevConfig {
  const e = parseEnvironment(schema, env);
  const development = config.env === 'development';
  if (config.stripe.secretKey && e.STRIPE_EMULATOR) {
    throw new ConfigError('Invalid configuration:\n  STRIPE_EMULATOR: the Stripe emulator stands in only when STRIPE_SECRET_KEY is unset');
  }
  if (e.LOCAL_WEB_APP && config.env === 'production') {
    throw new ConfigError('Invalid configuration:\n  LOCAL_WEB_APP: the local stand-in for the web app runs only in development or test, never in production');
  }
  // The service's webAppUrl is PUBLIC_URL's unless WEB_APP_URL is set.
  if (e.LOCAL_WEB_APP && new URL(config.webAppUrl).origin !== new URL(config.publicUrl).origin) {
    throw new ConfigError("Invalid configuration:\n  LOCAL_WEB_APP: the links of emails go to WEB_APP_URL, another origin than this service's; unset one of them");
  }
  return {
    maildev: { smtpPort: e.MAILDEV_SMTP_PORT, webPort: e.MAILDEV_WEB_PORT },
    stripeEmulator: { enabled: e.STRIPE_EMULATOR ?? (!config.stripe.secretKey && development), port: e.STRIPE_EMULATOR_PORT },
    clusterSimulator: {
      enabled: e.CLUSTER_SIMULATOR ?? development,
      port: e.CLUSTER_SIMULATOR_PORT,
      hostedPort: e.CLUSTER_SIMULATOR_HOSTED_PORT,
      modelLoadMs: e.CLUSTER_SIMULATOR_MODEL_LOAD_MS,
    },
    localWebApp: e.LOCAL_WEB_APP ?? (development && !env.WEB_APP_URL),
  };
}
