import { isIP } from 'node:net';
import { z } from 'zod';

/**
 * Every setting of the service, read from the environment once at start-up.
 * A bad value fails fast with a message naming the variable. The settings of the local stand-ins
 * that `make run` starts in place of missing parts are not the service's: dev/config.ts reads them.
 */
export const booleanFlag = z
  .enum(['true', 'false', '1', '0', 'yes', 'no', 'on', 'off'])
  .transform((value) => ['true', '1', 'yes', 'on'].includes(value));

const schema = z.object({
  // Unset means production: a forgotten NODE_ENV must not run with development defaults.
  NODE_ENV: z.enum(['development', 'test', 'production']).default('production'),
  ROLE: z.enum(['api', 'worker', 'all']).default('all'),
  HOST: z.string().min(1).default('127.0.0.1'),
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  METRICS_PORT: z.coerce.number().int().min(0).max(65535).optional(),
  METRICS_HOST: z.string().min(1).optional(),
  PUBLIC_URL: z.url().optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  DATABASE_URL: z.url().optional(),
  DATABASE_POOL_MAX: z.coerce.number().int().min(1).max(200).default(10),
  MIGRATE_ON_START: booleanFlag.optional(),
  DATA_DIR: z.string().min(1).default('.data'),
  EMBEDDED_PG_PORT: z.coerce.number().int().min(1).max(65535).default(54329),
  SESSION_COOKIE_NAME: z
    .string()
    .regex(/^[A-Za-z0-9_.-]+$/, 'must be a valid cookie name')
    .default('session'),
  SESSION_COOKIE_SECURE: booleanFlag.optional(),
  SESSION_COOKIE_SAMESITE: z.enum(['lax', 'strict', 'none']).default('lax'),
  ALLOWED_ORIGINS: z.string().optional(),
  RESPONSE_VALIDATION: booleanFlag.optional(),
  APP_SECRET: z.string().min(32, 'must be at least 32 characters').optional(),
  TRUST_PROXY: z.string().optional(),
  SMTP_URL: z.url().optional(),
  MAIL_FROM: z.string().min(3).default('Model Deployment <no-reply@model-deployment.local>'),
  EMAIL_RETRY_LIMIT: z.coerce.number().int().min(0).max(100).default(30),
  INVITATIONS_PER_DAY: z.coerce.number().int().min(1).max(100_000).default(50),
  EMAIL_RETRY_DELAY_SECONDS: z.coerce.number().int().min(1).default(5),
  EMAIL_RETRY_MAX_DELAY_SECONDS: z.coerce.number().int().min(1).default(900),
  WEB_APP_URL: z.url().optional(),
  OIDC_ISSUER: z.url().optional(),
  OIDC_CLIENT_ID: z.string().min(1).optional(),
  OIDC_CLIENT_SECRET: z.string().min(1).optional(),
  OIDC_PROVIDER_NAME: z.string().regex(/^[a-z0-9-]{1,64}$/, 'must be lower-case letters, digits or dashes').default('google'),
  OIDC_DISPLAY_NAME: z.string().min(1).optional(),
  MAX_ACTIVE_RESOURCES: z.coerce.number().int().min(0).default(5),
  STRIPE_SECRET_KEY: z.string().regex(/^(sk|rk)_(test|live)_\w+$/, 'must be a Stripe secret key (sk_test_… or sk_live_…)').optional(),
  STRIPE_PUBLISHABLE_KEY: z.string().regex(/^pk_(test|live)_\w+$/, 'must be a Stripe publishable key (pk_test_… or pk_live_…)').optional(),
  STRIPE_WEBHOOK_SECRET: z.string().regex(/^whsec_\S+$/, 'must be a webhook signing secret (whsec_…)').optional(),
  STRIPE_EVENT_DESTINATION_SECRET: z.string().regex(/^whsec_\S+$/, 'must be a webhook signing secret (whsec_…)').optional(),
  STRIPE_API_URL: z.url().optional(),
  BILLING_ENFORCEMENT: booleanFlag.optional(),
  RECONCILE_INTERVAL_SECONDS: z.coerce.number().min(0.2).default(30),
  DEPLOYMENT_STUCK_AFTER_SECONDS: z.coerce.number().min(0).default(60),
  DEPLOYMENT_START_TIMEOUT_SECONDS: z.coerce.number().min(1).default(1800),
  READINESS_POLL_SECONDS: z.coerce.number().min(0.1).default(2),
  AUTOSCALER_INTERVAL_SECONDS: z.coerce.number().min(0.2).default(1),
  SCALE_DOWN_COOLDOWN_SECONDS: z.coerce.number().min(0).default(60),
  REPLICA_DRAIN_TIMEOUT_SECONDS: z.coerce.number().min(1).default(600),
  COLD_START_TIMEOUT_SECONDS: z.coerce.number().min(1).default(300),
  COLD_START_MAX_HELD_REQUESTS: z.coerce.number().int().min(1).default(256),
  INFERENCE_CONNECT_TIMEOUT_SECONDS: z.coerce.number().positive().default(5),
  INFERENCE_FIRST_BYTE_TIMEOUT_SECONDS: z.coerce.number().positive().default(600),
  INFERENCE_IDLE_TIMEOUT_SECONDS: z.coerce.number().positive().default(60),
  /** Unset: DEPLOYMENT_START_TIMEOUT_SECONDS (an engine's recovery is a full reload). */
  DEPLOYMENT_RECOVERY_GRACE_SECONDS: z.coerce.number().min(0).optional(),
  ENGINE_TIMEOUT_SECONDS: z.coerce.number().min(1).default(60),
  SHUTDOWN_TIMEOUT_MS: z.coerce.number().int().min(0).default(15_000),
  SHUTDOWN_DRAIN_SECONDS: z.coerce.number().min(0).max(300).default(0),
  EVENT_STREAM_HEARTBEAT_SECONDS: z.coerce.number().min(0.05).max(300).default(15),
  EVENT_STREAMS_PER_USER: z.coerce.number().int().min(1).max(10_000).default(20),
  EVENT_STREAMS_PER_PROCESS: z.coerce.number().int().min(1).max(1_000_000).default(2_000),
  WEBHOOK_ALLOW_PRIVATE_TARGETS: booleanFlag.optional(),
  WEBHOOK_TIMEOUT_SECONDS: z.coerce.number().min(0.1).max(60).default(10),
  WEBHOOK_RETRY_LIMIT: z.coerce.number().int().min(0).max(50).default(12),
  WEBHOOK_RETRY_DELAY_SECONDS: z.coerce.number().int().min(1).default(10),
  WEBHOOK_RETRY_MAX_DELAY_SECONDS: z.coerce.number().int().min(1).default(3600),
  WEBHOOK_DISABLE_AFTER_FAILURES: z.coerce.number().int().min(1).max(1000).default(5),
  USAGE_RETENTION_MONTHS: z.coerce.number().int().min(2).max(1200).default(13),
  USAGE_JOURNAL_DIR: z.string().min(1).optional(),
  LIST_CACHE_MIN_ITEMS: z.coerce.number().int().min(0).optional(),
});

/** The settings' schema, which docs/configuration.md (scripts/config-table.ts) and `make k8s-check` read. */
export const configSchema = schema;

export interface Config {
  env: 'development' | 'test' | 'production';
  role: 'api' | 'worker' | 'all';
  host: string;
  port: number;
  publicUrl: string;
  logLevel: string;
  /** The Postgres to use; undefined means "start the embedded one". */
  databaseUrl: string | undefined;
  databasePoolMax: number;
  /**
   * Apply pending migrations at start-up (`MIGRATE_ON_START`, default on). Off where a migration
   * Job runs them once before a rollout, so replicas never race each other for the migration lock.
   */
  migrateOnStart: boolean;
  /**
   * The embedded Postgres used when DATABASE_URL is unset: its data under `DATA_DIR`, its port. Read
   * here, not in dev/config.ts, because `make migrate` and the operator CLI (src/cli/) find the one
   * `make run` runs through them.
   */
  dataDir: string;
  embeddedPgPort: number;
  /** The session cookies: with `secure`, both names carry the `__Host-` prefix. */
  session: { cookieName: string; csrfCookieName: string; secure: boolean; sameSite: 'lax' | 'strict' | 'none' };
  allowedOrigins: string[];
  /** Validate every response against the OpenAPI document (on outside production). */
  responseValidation: boolean;
  /** Server secret for CSRF tokens and encryption at rest; a fixed value only in development and test. */
  appSecret: string;
  /** Express `trust proxy` setting, so client addresses come from X-Forwarded-For behind a proxy. */
  trustProxy: boolean | number | string;
  /**
   * SMTP server for outgoing email; the service does not start without one (`make run` starts
   * MailDev, a local stand-in, in its place).
   */
  smtpUrl: string | undefined;
  mailFrom: string;
  /** Invitation emails (created or resent) an organization may send in 24 hours. */
  invitationsPerDay: number;
  /** Retries of an email that could not be sent, with exponential backoff from the delay. */
  emailRetry: { limit: number; delaySeconds: number; maxDelaySeconds: number };
  /** Where links in emails and SSO redirects land (the web app); defaults to PUBLIC_URL. */
  webAppUrl: string;
  oidc: { providerName: string; displayName: string; issuer?: string; clientId?: string; clientSecret?: string };
  /** Active deployments a new billing account may hold. */
  maxActiveResources: number;
  /**
   * Creating a deployment needs a default payment method and an active subscription
   * (`BILLING_ENFORCEMENT`; by default on exactly when a real processor, `STRIPE_SECRET_KEY`, is set).
   */
  billingEnforcement: boolean;
  /**
   * The payment processor: Stripe when `STRIPE_SECRET_KEY` is set (`apiUrl` points the SDK at another
   * host, such as an emulator); none otherwise, but under `make run`, whose Stripe emulator (a local
   * stand-in, dev/stripe/) is passed in these same settings.
   */
  stripe: {
    secretKey: string | undefined;
    publishableKey: string | undefined;
    webhookSecret: string | undefined;
    /** The signing secret of the event destination of thin events (meter errors); the webhook's when unset. */
    eventDestinationSecret: string | undefined;
    apiUrl: string | undefined;
  };
  provisioning: {
    /** How often the reconciler looks for deployments stuck in a step or lost by their engine. */
    reconcileIntervalSeconds: number;
    /** How long a step may go without progress before the reconciler resumes it. */
    stuckAfterSeconds: number;
    /** How long a model may take to load before the deployment fails its health check. */
    startTimeoutSeconds: number;
    /** How often a loading model's readiness is checked. */
    readinessPollSeconds: number;
    /** How long a running model may stay not ready on its engine (auto-recovery) before it fails. */
    recoveryGraceSeconds: number;
  };
  /** Replicas on load and scale to zero (src/deployments/scaling.ts, src/inference/cold-start.ts). */
  scaling: {
    /** How often the autoscaler decides each running deployment's replicas. */
    intervalSeconds: number;
    /** How long the load must want fewer replicas before one is drained. */
    scaleDownCooldownSeconds: number;
    /** The longest a draining replica waits for its requests before its model is stopped anyway. */
    drainTimeoutSeconds: number;
    /** The longest a request waits for a deployment to scale up from zero (a caller's `X-Scale-Up-Timeout` shortens it). */
    coldStartTimeoutSeconds: number;
    /** Requests one API process holds for one deployment during a cold start; more answer 503 at once. */
    coldStartMaxHeld: number;
  };
  /** Limits on each relay of an inference request to its engine. */
  inference: {
    /** To open the connection to the engine. */
    connectTimeoutMs: number;
    /** From sending the request to the first byte of the answer's body (prefill and queueing included). */
    firstByteTimeoutMs: number;
    /** Between two chunks of the answer's body, once it has started. */
    idleTimeoutMs: number;
  };
  /** Timeout of one management call to an engine; a DELETE may take 5 to 36 s on Xinference. */
  engineTimeoutSeconds: number;
  shutdownTimeoutMs: number;
  /** On SIGTERM, how long `/readyz` answers 503 while requests are still served, before the server closes. */
  shutdownDrainMs: number;
  /** How often an open deployment event stream sends a `: keep-alive` comment. */
  eventStreamHeartbeatMs: number;
  /** Deployment event streams open at once in one process: in all, and per user (429 past either). */
  eventStreamLimits: { perProcess: number; perUser: number };
  /**
   * The Prometheus metrics listener (src/metrics/): `/metrics` on a port of its own, never on the
   * public API port; undefined (METRICS_PORT unset) means no listener and nothing recorded.
   */
  metrics: { port: number; host: string } | undefined;
  /** Organization webhooks (src/webhooks/). */
  webhooks: {
    /** Targets on loopback, link-local, private and other non-public addresses, and plain http, are allowed (tests, closed networks). */
    allowPrivateTargets: boolean;
    /** Timeout of one delivery attempt. */
    timeoutMs: number;
    /** Retries of a delivery after its first attempt, with exponential backoff from the delay up to the longest. */
    retry: { limit: number; delaySeconds: number; maxDelaySeconds: number };
    /** Deliveries in a row that failed for good before the endpoint is disabled. */
    disableAfterFailures: number;
  };
  /** Whole months of raw usage records kept after the month in progress (src/metering/usage-partitions.ts). */
  usageRetentionMonths: number;
  /**
   * Where usage records are journaled before their answers end (src/inference/usage-journal.ts);
   * unset: a directory per database under the machine's temporary one; `off`: no journal (each
   * complete answer waits for its usage's group commit instead).
   */
  usageJournalDir: string | undefined;
  /**
   * An organization's whole list (invitations, API keys, deployment options) of at least this many
   * items is kept per process between its changes (`OrganizationListCache`). 200 by default; 0 in
   * test, so that every list the suite reads after a change goes through the kept copy's checks.
   */
  listCacheMinItems: number;
}

export class ConfigError extends Error {}

/** The environment read through `settings` (an empty variable counts as unset); a ConfigError naming every bad one. */
export function parseEnvironment<Schema extends z.ZodType>(settings: Schema, env: NodeJS.ProcessEnv): z.output<Schema> {
  const parsed = settings.safeParse(Object.fromEntries(Object.entries(env).filter(([, value]) => value !== '')));
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
    throw new ConfigError(`Invalid configuration:\n  ${problems.join('\n  ')}`);
  }
  return parsed.data;
}

/** What a process that only migrates the database needs: where the database is, and how much to log. */
export type DatabaseSettings = Pick<Config, 'logLevel' | 'databaseUrl' | 'dataDir' | 'embeddedPgPort'>;

/**
 * The settings of `node dist/cli/migrate.js` (the migrations Job): the database's alone, so a
 * migration runs without the service's secrets and peers (no `APP_SECRET`, `SMTP_URL`, Stripe keys),
 * which it never uses. Each is read and checked as `loadConfig` reads it.
 */
export function loadDatabaseSettings(env: NodeJS.ProcessEnv = process.env): DatabaseSettings {
  const e = parseEnvironment(schema.pick({ LOG_LEVEL: true, DATABASE_URL: true, DATA_DIR: true, EMBEDDED_PG_PORT: true }), env);
  return { logLevel: e.LOG_LEVEL, databaseUrl: e.DATABASE_URL, dataDir: e.DATA_DIR, embeddedPgPort: e.EMBEDDED_PG_PORT };
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const e = parseEnvironment(schema, env);
  const publicUrl = (e.PUBLIC_URL ?? `http://localhost:${e.PORT}`).replace(/\/+$/, '');
  const sameSite = e.SESSION_COOKIE_SAMESITE;
  const local = e.NODE_ENV === 'development' || e.NODE_ENV === 'test';
  if (!local && !e.APP_SECRET) {
    throw new ConfigError(
      'Invalid configuration:\n  APP_SECRET: required (at least 32 random characters) unless NODE_ENV is development or test; NODE_ENV is production when unset',
    );
  }
  if (e.NODE_ENV === 'production' && !e.SMTP_URL) {
    throw new ConfigError('Invalid configuration:\n  SMTP_URL: required in production');
  }
  const oidcSet = [e.OIDC_ISSUER, e.OIDC_CLIENT_ID, e.OIDC_CLIENT_SECRET].filter(Boolean).length;
  if (oidcSet !== 0 && oidcSet !== 3) {
    throw new ConfigError('Invalid configuration:\n  OIDC_ISSUER, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET: set all three or none');
  }
  if (e.OIDC_ISSUER && !isHttpsOrLoopback(e.OIDC_ISSUER)) {
    throw new ConfigError('Invalid configuration:\n  OIDC_ISSUER: must be an https URL (http only on a loopback host)');
  }
  if (e.STRIPE_SECRET_KEY && (!e.STRIPE_PUBLISHABLE_KEY || !e.STRIPE_WEBHOOK_SECRET)) {
    throw new ConfigError('Invalid configuration:\n  STRIPE_PUBLISHABLE_KEY, STRIPE_WEBHOOK_SECRET: required with STRIPE_SECRET_KEY');
  }
  // Xinference recovers a crashed model by loading it again: a grace shorter than a load fails a
  // large model's legitimate reload (worker.py, recover_sub_pool).
  if (e.NODE_ENV === 'production' && e.DEPLOYMENT_RECOVERY_GRACE_SECONDS !== undefined && e.DEPLOYMENT_RECOVERY_GRACE_SECONDS < e.DEPLOYMENT_START_TIMEOUT_SECONDS) {
    throw new ConfigError(
      'Invalid configuration:\n  DEPLOYMENT_RECOVERY_GRACE_SECONDS: at least DEPLOYMENT_START_TIMEOUT_SECONDS in production (a recovery reloads the model); unset, it is the start timeout',
    );
  }
  if (e.METRICS_HOST !== undefined && e.METRICS_PORT === undefined) {
    throw new ConfigError('Invalid configuration:\n  METRICS_HOST: set METRICS_PORT too (without it no metrics listener starts)');
  }
  if (e.METRICS_PORT !== undefined && e.METRICS_PORT !== 0 && e.METRICS_PORT === e.PORT && e.ROLE !== 'worker') {
    throw new ConfigError('Invalid configuration:\n  METRICS_PORT: must differ from PORT (the public API port never serves /metrics)');
  }
  const secure = e.SESSION_COOKIE_SECURE ?? e.NODE_ENV === 'production';
  if (e.NODE_ENV === 'production' && !secure) {
    throw new ConfigError('Invalid configuration:\n  SESSION_COOKIE_SECURE: must be true in production (session cookies must never travel over plain HTTP)');
  }
  if (sameSite === 'none' && !secure) {
    throw new ConfigError('Invalid configuration:\n  SESSION_COOKIE_SAMESITE: "none" requires SESSION_COOKIE_SECURE=true');
  }
  if (e.SESSION_COOKIE_NAME.startsWith(HOST_PREFIX) && !secure) {
    throw new ConfigError(`Invalid configuration:\n  SESSION_COOKIE_NAME: the ${HOST_PREFIX} prefix requires SESSION_COOKIE_SECURE=true`);
  }
  return {
    env: e.NODE_ENV,
    role: e.ROLE,
    host: e.HOST,
    port: e.PORT,
    publicUrl,
    logLevel: e.LOG_LEVEL,
    databaseUrl: e.DATABASE_URL,
    databasePoolMax: e.DATABASE_POOL_MAX,
    migrateOnStart: e.MIGRATE_ON_START ?? true,
    dataDir: e.DATA_DIR,
    embeddedPgPort: e.EMBEDDED_PG_PORT,
    session: {
      cookieName: secure ? withHostPrefix(e.SESSION_COOKIE_NAME) : e.SESSION_COOKIE_NAME,
      csrfCookieName: secure ? withHostPrefix(CSRF_COOKIE) : CSRF_COOKIE,
      secure,
      sameSite,
    },
    allowedOrigins: parseOrigins(e.ALLOWED_ORIGINS ?? [publicUrl, e.WEB_APP_URL ?? publicUrl].join(',')),
    responseValidation: e.RESPONSE_VALIDATION ?? e.NODE_ENV !== 'production',
    appSecret: e.APP_SECRET ?? DEVELOPMENT_SECRET,
    trustProxy: parseTrustProxy(e.TRUST_PROXY),
    smtpUrl: e.SMTP_URL,
    mailFrom: e.MAIL_FROM,
    invitationsPerDay: e.INVITATIONS_PER_DAY,
    emailRetry: { limit: e.EMAIL_RETRY_LIMIT, delaySeconds: e.EMAIL_RETRY_DELAY_SECONDS, maxDelaySeconds: e.EMAIL_RETRY_MAX_DELAY_SECONDS },
    webAppUrl: (e.WEB_APP_URL ?? publicUrl).replace(/\/+$/, ''),
    oidc: {
      providerName: e.OIDC_PROVIDER_NAME,
      displayName: e.OIDC_DISPLAY_NAME ?? titleCase(e.OIDC_PROVIDER_NAME),
      issuer: e.OIDC_ISSUER,
      clientId: e.OIDC_CLIENT_ID,
      clientSecret: e.OIDC_CLIENT_SECRET,
    },
    maxActiveResources: e.MAX_ACTIVE_RESOURCES,
    billingEnforcement: e.BILLING_ENFORCEMENT ?? Boolean(e.STRIPE_SECRET_KEY),
    stripe: {
      secretKey: e.STRIPE_SECRET_KEY,
      publishableKey: e.STRIPE_PUBLISHABLE_KEY,
      webhookSecret: e.STRIPE_WEBHOOK_SECRET,
      eventDestinationSecret: e.STRIPE_EVENT_DESTINATION_SECRET,
      apiUrl: e.STRIPE_API_URL,
    },
    provisioning: {
      reconcileIntervalSeconds: e.RECONCILE_INTERVAL_SECONDS,
      stuckAfterSeconds: e.DEPLOYMENT_STUCK_AFTER_SECONDS,
      startTimeoutSeconds: e.DEPLOYMENT_START_TIMEOUT_SECONDS,
      readinessPollSeconds: e.READINESS_POLL_SECONDS,
      recoveryGraceSeconds: e.DEPLOYMENT_RECOVERY_GRACE_SECONDS ?? e.DEPLOYMENT_START_TIMEOUT_SECONDS,
    },
    scaling: {
      intervalSeconds: e.AUTOSCALER_INTERVAL_SECONDS,
      scaleDownCooldownSeconds: e.SCALE_DOWN_COOLDOWN_SECONDS,
      drainTimeoutSeconds: e.REPLICA_DRAIN_TIMEOUT_SECONDS,
      coldStartTimeoutSeconds: e.COLD_START_TIMEOUT_SECONDS,
      coldStartMaxHeld: e.COLD_START_MAX_HELD_REQUESTS,
    },
    inference: {
      connectTimeoutMs: e.INFERENCE_CONNECT_TIMEOUT_SECONDS * 1000,
      firstByteTimeoutMs: e.INFERENCE_FIRST_BYTE_TIMEOUT_SECONDS * 1000,
      idleTimeoutMs: e.INFERENCE_IDLE_TIMEOUT_SECONDS * 1000,
    },
    engineTimeoutSeconds: e.ENGINE_TIMEOUT_SECONDS,
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT_MS,
    shutdownDrainMs: e.SHUTDOWN_DRAIN_SECONDS * 1000,
    eventStreamHeartbeatMs: e.EVENT_STREAM_HEARTBEAT_SECONDS * 1000,
    eventStreamLimits: { perProcess: e.EVENT_STREAMS_PER_PROCESS, perUser: e.EVENT_STREAMS_PER_USER },
    metrics: e.METRICS_PORT === undefined ? undefined : { port: e.METRICS_PORT, host: e.METRICS_HOST ?? '127.0.0.1' },
    webhooks: {
      allowPrivateTargets: e.WEBHOOK_ALLOW_PRIVATE_TARGETS ?? false,
      timeoutMs: e.WEBHOOK_TIMEOUT_SECONDS * 1000,
      retry: { limit: e.WEBHOOK_RETRY_LIMIT, delaySeconds: e.WEBHOOK_RETRY_DELAY_SECONDS, maxDelaySeconds: e.WEBHOOK_RETRY_MAX_DELAY_SECONDS },
      disableAfterFailures: e.WEBHOOK_DISABLE_AFTER_FAILURES,
    },
    usageRetentionMonths: e.USAGE_RETENTION_MONTHS,
    usageJournalDir: e.USAGE_JOURNAL_DIR,
    listCacheMinItems: e.LIST_CACHE_MIN_ITEMS ?? (e.NODE_ENV === 'test' ? 0 : 200),
  };
}

/** In development and test only: sessions and encrypted data of a development database use it. */
const DEVELOPMENT_SECRET = 'development-only-secret-do-not-use-in-production';

const CSRF_COOKIE = 'csrf_token';
/**
 * Browsers accept a `__Host-` cookie only when it is Secure, has `Path=/` and no `Domain`, so no
 * sibling subdomain or plain-HTTP page can plant or overwrite it (a login-CSRF variant).
 */
const HOST_PREFIX = '__Host-';

function withHostPrefix(name: string): string {
  return name.startsWith(HOST_PREFIX) ? name : `${HOST_PREFIX}${name}`;
}

function parseTrustProxy(value: string | undefined): boolean | number | string {
  if (value === undefined || value === 'false') return false;
  if (value === 'true') return true;
  return /^\d+$/.test(value) ? Number(value) : value;
}

/** 127.0.0.0/8, ::1 and localhost: hosts that never leave the machine. */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.split('.')[0] === '127';
  return isIP(host) === 6 && (host === '::1' || host === '0:0:0:0:0:0:0:1');
}

/** An https URL, or an http one on a loopback host (tests and local development). */
export function isHttpsOrLoopback(url: string): boolean {
  const parsed = new URL(url);
  return parsed.protocol === 'https:' || (parsed.protocol === 'http:' && isLoopbackHost(parsed.hostname));
}

function titleCase(name: string): string {
  return name.charAt(0).toUpperCase() + name.slice(1);
}

function parseOrigins(list: string): string[] {
  const origins = list.split(',').map((origin) => origin.trim()).filter(Boolean);
  for (const origin of origins) {
    if (!URL.canParse(origin)) {
      throw new ConfigError(`Invalid configuration:\n  ALLOWED_ORIGINS: "${origin}" is not a URL`);
    }
  }
  return [...new Set(origins.map((origin) => new URL(origin).origin))];
}
