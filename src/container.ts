import type { Knex } from 'knex';
import type { Document } from 'openapi-backend';
import type { PgBoss } from 'pg-boss';
import type { Logger } from 'pino';
import { AccountsService } from './accounts/accounts.service.ts';
import { SessionCookies } from './accounts/cookies.ts';
import { EmailVerificationService } from './accounts/email-verification.service.ts';
import { PasswordResetService, passwordResetJob } from './accounts/password-reset.service.ts';
import { pruneEndedSessionsJob, SessionStore } from './accounts/sessions.ts';
import { SsoService } from './accounts/sso.service.ts';
import { Mailer } from './adapters/mailer.ts';
import type { Config } from './config.ts';
import { Keyring } from './crypto.ts';
import { EmailOutbox, sendEmailJob } from './email/email.outbox.ts';
import type { SecurityHandlers } from './http/openapi.ts';
import { sessionSecurity } from './accounts/session-security.ts';
import { apiKeyAuthentication } from './api-keys/api-key-authentication.ts';
import type { JobDefinition } from './jobs/queue.ts';
import { Metrics } from './metrics/metrics.ts';
import { expireInvitationsJob, InvitationsService } from './invitations/invitations.service.ts';
import { OrganizationsService } from './organizations/organizations.service.ts';
import { Readiness } from './platform/readiness.ts';
import { RateLimiter } from './rate-limit/rate-limiter.ts';
import { CatalogService } from './catalog/catalog.service.ts';
import { ClustersService } from './clusters/clusters.service.ts';
import { DeploymentsService } from './deployments/deployments.service.ts';
import { Provisioner, provisioningJobs } from './deployments/provisioning.ts';
import { ApiKeysService } from './api-keys/api-keys.service.ts';
import { OrganizationListCache } from './organizations/list-cache.ts';
import { InferenceRouter } from './inference/routing.ts';
import { UsageRecorder } from './inference/usage.ts';
import { USAGE_JOURNAL_KEY_PURPOSE, UsageJournal } from './inference/usage-journal.ts';
import { KeyLimiter } from './inference/key-limiter.ts';
import { createInferenceService } from './inference/inference.service.ts';
import { ColdStarts } from './inference/cold-start.ts';
import { DeploymentLoad } from './inference/deployment-load.ts';
import { pruneRequestMetricsJob, RequestMetrics } from './inference/request-metrics.ts';
import { Scaler, scalingJobs } from './deployments/scaling.ts';
import { EngineLog } from './deployments/engine-log.ts';
import { GpuMeter, meterGpuSecondsJob } from './metering/gpu-metering.ts';
import { paymentProcessor } from './adapters/stripe.ts';
import { BillingService } from './billing/billing.service.ts';
import { BillingWebhooks, billingEventJob } from './billing/billing-webhooks.ts';
import { reportUsageJob, UsageReporter } from './billing/usage-reporting.ts';
import { reconcileUsageJob, UsageReconciler } from './billing/usage-reconciliation.ts';
import { maintainUsagePartitionsJob } from './metering/usage-partitions.ts';
import { compactUsageRollupsJob } from './metering/usage-rollups.ts';
import { SpendingAlerts, spendingAlertsJob } from './billing/spending-alerts.ts';
import { DeploymentEventStreams } from './events/event-streams.ts';
import { WebhooksService } from './webhooks/webhooks.service.ts';
import { deliverWebhookJob, pruneWebhookDeliveriesJob, WebhookDeliverer, WebhookDispatcher } from './webhooks/webhook-delivery.ts';

export interface ContainerDeps {
  config: Config;
  log: Logger;
  db: Knex;
  boss: PgBoss;
  document: Document;
  /** The SMTP server to send through (SMTP_URL, MailDev or a test listener). */
  smtpUrl: string;
  /** Where usage records are written, when not `db`: a pool whose commits do not wait for the disk. */
  usageDb?: Knex;
  /** Where each usage record is appended before its answer ends (none: committed to the database then instead). */
  usageJournalDir?: string | undefined;
}

/** Every long-lived object of the service, built with plain constructors (no DI framework). */
export function createContainer(deps: ContainerDeps) {
  const { config, db, boss } = deps;
  // Only with METRICS_PORT: without it nothing is recorded.
  const metrics = config.metrics ? new Metrics(deps.log) : undefined;
  const keyring = new Keyring(config.appSecret);
  const readiness = new Readiness(db);
  const sessions = new SessionStore(db);
  const cookies = new SessionCookies(config.session, keyring);
  const limiter = new RateLimiter(db);
  const mailer = new Mailer(deps.smtpUrl, config.mailFrom);
  const outbox = new EmailOutbox(boss, keyring);
  const emailVerification = new EmailVerificationService({ db, outbox, limiter, webAppUrl: config.webAppUrl });
  const lists = new OrganizationListCache(db, { minItems: config.listCacheMinItems });
  const apiKeys = new ApiKeysService(db, lists);
  const organizations = new OrganizationsService({ db, sessions, apiKeys, maxActiveResources: config.maxActiveResources });
  const accounts = new AccountsService({ db, sessions, limiter, organizations, emailVerification });
  const passwordReset = new PasswordResetService({ db, boss, limiter, sessions });
  const sso = new SsoService({ db, sessions, keyring, config });
  const invitations = new InvitationsService({ db, outbox, sessions, limiter, webAppUrl: config.webAppUrl, lists, perDay: config.invitationsPerDay });
  const catalog = new CatalogService(db, keyring);
  const clusters = new ClustersService({
    db,
    keyring,
    log: deps.log,
    engineTimeoutSeconds: config.engineTimeoutSeconds,
    loadTimeoutSeconds: config.provisioning.startTimeoutSeconds,
  });
  const deployments = new DeploymentsService({ db, boss, catalog, billing: { enforcement: config.billingEnforcement }, keyring, log: deps.log });
  const engineLog = new EngineLog({ db, clusters });
  const scaler = new Scaler({ db, boss, clusters, provisioning: config.provisioning, scaling: config.scaling, engineLog });
  const provisioner = new Provisioner({ db, boss, clusters, settings: config.provisioning, replicaLost: (...lost) => scaler.replicaLost(...lost), engineLog });
  const deploymentLoad = new DeploymentLoad(db, deps.log);
  const requestMetrics = new RequestMetrics(db, deps.log);
  const coldStarts = new ColdStarts({ db, boss, load: deploymentLoad, settings: config.scaling, log: deps.log });
  const router = new InferenceRouter({ db, clusters, log: deps.log, billing: { enforcement: config.billingEnforcement }, load: deploymentLoad, coldStarts });
  const journal = deps.usageJournalDir === undefined ? undefined : new UsageJournal(deps.usageJournalDir, deps.log, keyring.key(USAGE_JOURNAL_KEY_PURPOSE));
  const usage = new UsageRecorder(deps.usageDb ?? db, deps.log, { metrics, journal });
  const keyLimiter = new KeyLimiter(db, deps.log);
  const inference = createInferenceService({ router, usage, keyLimiter, config, metrics });
  const gpuMeter = new GpuMeter(db);
  const processor = paymentProcessor(config);
  const billing = new BillingService({
    db,
    processor,
    settings: {
      publishableKey: config.stripe.publishableKey,
      billingPageUrl: `${config.webAppUrl}/settings/billing`,
      allowedOrigins: config.allowedOrigins,
      enforcement: config.billingEnforcement,
    },
  });
  const billingWebhooks = new BillingWebhooks({ db, boss, processor });
  const spendingAlerts = new SpendingAlerts({ db, outbox, billingPageUrl: `${config.webAppUrl}/settings/billing` });
  // Without a processor (none configured), usage waits in Postgres unreported.
  const usageReporter = processor ? new UsageReporter(db, processor) : undefined;
  const usageReconciler = processor ? new UsageReconciler(db, processor) : undefined;
  const eventStreams = new DeploymentEventStreams({ db, log: deps.log, heartbeatMs: config.eventStreamHeartbeatMs, limits: config.eventStreamLimits });
  const webhooks = new WebhooksService({ db, boss, keyring, settings: config.webhooks });
  const webhookDeliverer = new WebhookDeliverer({ db, keyring, outbox, settings: config.webhooks, webAppUrl: config.webAppUrl, metrics });
  const webhookDispatcher = new WebhookDispatcher({ db, boss, log: deps.log });
  return {
    ...deps,
    metrics,
    keyring,
    readiness,
    sessions,
    cookies,
    limiter,
    mailer,
    outbox,
    emailVerification,
    accounts,
    passwordReset,
    sso,
    organizations,
    invitations,
    catalog,
    clusters,
    deployments,
    provisioner,
    scaler,
    deploymentLoad,
    requestMetrics,
    coldStarts,
    apiKeys,
    router,
    usage,
    keyLimiter,
    inference,
    gpuMeter,
    processor,
    billing,
    billingWebhooks,
    spendingAlerts,
    usageReporter,
    usageReconciler,
    eventStreams,
    webhooks,
    webhookDeliverer,
    webhookDispatcher,
  };
}

export type Container = ReturnType<typeof createContainer>;

/** Every background job kind of the service. */
export function jobDefinitions(c: Container): JobDefinition[] {
  return [
    sendEmailJob({ db: c.db, keyring: c.keyring, mailer: c.mailer, retry: c.config.emailRetry, metrics: c.metrics }),
    passwordResetJob({ db: c.db, outbox: c.outbox, webAppUrl: c.config.webAppUrl }),
    expireInvitationsJob(c.invitations),
    ...provisioningJobs(c.provisioner, c.boss, c.config.provisioning),
    ...scalingJobs(c.scaler, c.boss, c.config.scaling),
    meterGpuSecondsJob(c.gpuMeter),
    billingEventJob(c.billingWebhooks),
    spendingAlertsJob(c.spendingAlerts),
    ...(c.usageReporter ? [reportUsageJob(c.usageReporter)] : []),
    ...(c.usageReconciler ? [reconcileUsageJob(c.usageReconciler)] : []),
    deliverWebhookJob(c.webhookDeliverer, c.config.webhooks),
    pruneWebhookDeliveriesJob(c.db),
    pruneEndedSessionsJob(c.sessions),
    compactUsageRollupsJob(c.db),
    pruneRequestMetricsJob(c.db),
    maintainUsagePartitionsJob(c.db, { retentionMonths: c.config.usageRetentionMonths, reportsUsage: c.usageReporter !== undefined }),
  ] as JobDefinition[];
}

export function securityHandlers(c: Container): SecurityHandlers {
  return {
    ...sessionSecurity({ sessions: c.sessions, cookies: c.cookies }),
    ApiKeyBearer: apiKeyAuthentication({ apiKeys: c.apiKeys }),
  };
}
