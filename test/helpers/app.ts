import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Knex } from 'knex';
import { createApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config.ts';
import { createContainer, securityHandlers, type Container } from '../../src/container.ts';
import { createDatabase } from '../../src/db/database.ts';
import { buildHandlers } from '../../src/handlers.ts';
import { closeServer, listen } from '../../src/http/server.ts';
import { createJobQueue } from '../../src/jobs/queue.ts';
import { createLogger } from '../../src/logger.ts';
import { loadOpenApiDocument } from '../../src/openapi-document.ts';
import type { ClusterSimulator, ClusterSimulatorOptions, SimulatedWorker } from '../../dev/cluster-simulator.ts';
import { startLocalCluster } from '../../dev/local-cluster.ts';
import { startRuntime } from '../../src/runtime.ts';
import { createTestDatabase } from './database.ts';
import { Inbox } from './inbox.ts';
import { createStripeClient } from '../../src/adapters/stripe.ts';
import { EVENT_NOTIFICATIONS_PATH, THIN_EVENT_TYPES, WEBHOOK_PATH } from '../../dev/local-stripe.ts';
import { startStripeEmulator, type StripeEmulator } from '../../dev/stripe/stripe-emulator.ts';
import type Stripe from 'stripe';

/** The origin tests send as `Origin`, allowed by the test configuration. */
export const APP_ORIGIN = 'http://app.test';

export interface TestApp {
  /** Base URL, e.g. http://127.0.0.1:43567 */
  url: string;
  /** The metrics listener's base URL (METRICS_PORT set, `0` for any free port); undefined without one. */
  metricsUrl: string | undefined;
  db: Knex;
  container: Container;
  /** The SMTP listener the service sends email to. */
  inbox: Inbox;
  /** The GPU cluster simulator registered as the cluster, when asked for. */
  simulator: ClusterSimulator | undefined;
  /** The Stripe emulator the service uses as its payment processor, and the SDK on it, when asked for. */
  stripe: { emulator: StripeEmulator; sdk: Stripe } | undefined;
  /** The settings the service runs with (for a second process on the same database). */
  env: Record<string, string>;
  /** Whether this process runs the background jobs (email, provisioning, the reconciler). */
  workers: boolean;
  databaseUrl: string;
  close(): Promise<void>;
}

export const TEST_APP_SECRET = 'test-secret-test-secret-test-secret-0123';

/** Settings that make background provisioning quick enough to watch in a test. */
export const FAST_PROVISIONING = {
  RECONCILE_INTERVAL_SECONDS: '0.5',
  DEPLOYMENT_STUCK_AFTER_SECONDS: '2',
  READINESS_POLL_SECONDS: '0.2',
  DEPLOYMENT_RECOVERY_GRACE_SECONDS: '3',
};

export interface TestAppOptions {
  /**
   * Run the background jobs in this process (ROLE=all): email delivery, provisioning and the
   * reconciler. Off by default (ROLE=api): jobs are queued and wait, nothing polls. An `env` that
   * names ROLE wins.
   */
  workers?: boolean;
  /** Start the GPU cluster simulator and register it as the cluster. */
  cluster?: { modelLoadMs?: number; tokenLatencyMs?: number; workers?: SimulatedWorker[]; simulator?: Partial<ClusterSimulatorOptions> };
  /**
   * Start a Stripe emulator as the payment processor (through the `stripe` SDK, as with Stripe), with
   * a webhook endpoint to this app's webhook route. Without it, no processor is configured.
   */
  stripe?: boolean;
  /** Every line the service logs, at debug, is pushed here (to look for secrets in them). */
  logLines?: string[];
  /** A database of the test's own (one it stops and starts) instead of a copy of the template. */
  database?: { url: string; drop(): Promise<void> };
}

/**
 * The service's HTTP API (and, when asked, its background workers) on a loopback port, in a
 * database of its own, sending email to a real SMTP listener; responses are validated against the
 * contract, so a response that breaks it fails the test.
 */
export async function startTestApp(env: Record<string, string> = {}, options: TestAppOptions = {}): Promise<TestApp> {
  const database = options.database ?? (await createTestDatabase());
  const inbox = await new Inbox().start();
  const stripe = options.stripe ? await startStripeForApp() : undefined;
  // The usage journal of this app and the service processes a test starts beside it (same env).
  const journalDir = await mkdtemp(path.join(tmpdir(), 'usage-journal-test-'));
  const settings = {
    NODE_ENV: 'test',
    PORT: '0',
    HOST: '127.0.0.1',
    PUBLIC_URL: APP_ORIGIN,
    APP_SECRET: TEST_APP_SECRET,
    ROLE: options.workers ? 'all' : 'api',
    USAGE_JOURNAL_DIR: journalDir,
    ...stripe?.env,
    ...env,
  };
  const config = loadConfig(settings);
  const lines = options.logLines;
  const log = lines ? createLogger('debug', { write: (line: string) => void lines.push(line) }) : createLogger('silent');
  const service = await startRuntime({ config, log, databaseUrl: database.url, smtpUrl: inbox.url });
  const simulator = options.cluster ? await startLocalCluster({ clusters: service.container.clusters, log, ...options.cluster }) : undefined;
  const url = `http://127.0.0.1:${service.port}`;
  if (stripe) await pointStripeAt(stripe, url);
  return {
    url,
    metricsUrl: service.metricsPort === undefined ? undefined : `http://127.0.0.1:${service.metricsPort}`,
    db: service.container.db,
    container: service.container,
    inbox,
    simulator,
    stripe: stripe && { emulator: stripe.emulator, sdk: stripe.sdk },
    env: settings,
    workers: config.role !== 'api',
    databaseUrl: database.url,
    close: async () => {
      await service.stop();
      await simulator?.stop();
      await stripe?.emulator.stop();
      await inbox.stop();
      await database.drop();
      await rm(journalDir, { recursive: true, force: true });
    },
  };
}

/** Where the emulator's endpoints point until the app listens: a closed port, so a delivery there fails and is retried. */
const NOT_YET_LISTENING = 'http://127.0.0.1:9';

/**
 * The emulator with a webhook endpoint and an event destination for the app, and the SDK on it. The
 * app's port is known only once it listens, so they point nowhere until `pointStripeAt` (their
 * signing secrets, which the app's settings need at start, are made with them and kept).
 */
async function startStripeForApp(): Promise<{ emulator: StripeEmulator; sdk: Stripe; env: Record<string, string> }> {
  // Retries come quickly here: a test waits for the second attempt, not for Stripe's hours.
  const emulator = await startStripeEmulator({
    log: createLogger('silent'),
    webhooks: [{ url: `${NOT_YET_LISTENING}${WEBHOOK_PATH}` }],
    eventDestinations: [{ url: `${NOT_YET_LISTENING}${EVENT_NOTIFICATIONS_PATH}`, enabledEvents: THIN_EVENT_TYPES }],
    webhookRetryDelaysMs: [100, 200, 400, 800, 1600],
  });
  return {
    emulator,
    sdk: createStripeClient({ secretKey: emulator.secretKey, apiUrl: emulator.url }),
    env: {
      STRIPE_SECRET_KEY: emulator.secretKey,
      STRIPE_PUBLISHABLE_KEY: emulator.publishableKey,
      STRIPE_WEBHOOK_SECRET: emulator.webhookSecrets[0] ?? '',
      STRIPE_EVENT_DESTINATION_SECRET: emulator.eventDestinationSecrets[0] ?? '',
      STRIPE_API_URL: emulator.url,
    },
  };
}

/** Points the emulator's webhook endpoint (as an operator would, through the API) and event destination at the app listening at `appUrl`. */
async function pointStripeAt(stripe: { emulator: StripeEmulator; sdk: Stripe }, appUrl: string): Promise<void> {
  for (const endpoint of (await stripe.sdk.webhookEndpoints.list()).data) await stripe.sdk.webhookEndpoints.update(endpoint.id, { url: `${appUrl}${WEBHOOK_PATH}` });
  stripe.emulator.pointEventDestination(0, `${appUrl}${EVENT_NOTIFICATIONS_PATH}`);
}

/**
 * A container on a database that need not exist, with nothing started: for tests of the HTTP
 * binding itself and of behaviour when Postgres does not answer.
 */
export function offlineContainer(databaseUrl = 'postgres://postgres@127.0.0.1:9/none'): Container {
  const config = loadConfig({ NODE_ENV: 'test', APP_SECRET: TEST_APP_SECRET, PUBLIC_URL: APP_ORIGIN });
  const log = createLogger('silent');
  return createContainer({
    config,
    log,
    db: createDatabase({ url: databaseUrl, poolMax: 2, acquireTimeoutMs: 1_000 }),
    boss: createJobQueue({ url: databaseUrl, work: false, log }),
    document: loadOpenApiDocument(),
    smtpUrl: 'smtp://127.0.0.1:9',
  });
}

/** The Express app of a container, listening on loopback, without migrations or workers. */
export async function listenOn(container: Container, options: { hsts?: boolean } = {}): Promise<{ url: string; close(): Promise<void> }> {
  const app = await createApp({
    logger: container.log,
    document: container.document,
    handlers: buildHandlers(container),
    security: securityHandlers(container),
    allowedOrigins: container.config.allowedOrigins,
    trustProxy: false,
    validateResponses: true,
    requestMetrics: container.requestMetrics,
    ...options,
  });
  const server = await listen(app, 0, '127.0.0.1');
  const address = server.address();
  return {
    url: `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`,
    close: async () => {
      await closeServer(server, 1_000);
      await container.db.destroy();
    },
  };
}
