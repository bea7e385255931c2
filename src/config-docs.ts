/**
 * What each setting of src/config.ts means, for the table of docs/configuration.md, which
 * scripts/config-table.ts writes (`make generate`) and `make check-generated` holds to the schema: a
 * setting of the schema without an entry here, or an entry for no setting, fails it. A setting with a
 * `.default()` in the schema takes its default from there; the others say here what happens when
 * they are unset. Markdown, with links relative to docs/.
 */
export interface SettingDoc {
  meaning: string;
  /** For a setting without a `.default()` in the schema: its value when unset. */
  default?: string;
}

export const SETTING_DOCS: Record<string, SettingDoc> = {
  NODE_ENV: { meaning: '`development`, `test` or `production`. Unset means production, so a forgotten `NODE_ENV` never runs with development defaults; `make run` and `make migrate` set `development` unless you set it' },
  ROLE: { meaning: '`api` (HTTP only), `worker` (background jobs only) or `all` (both, one process)' },
  HOST: { meaning: 'Address to listen on (`0.0.0.0` in a container)' },
  PORT: { meaning: 'HTTP port' },
  METRICS_PORT: { meaning: 'Port of the Prometheus metrics listener (`/metrics`, see [Metrics](operating.md#metrics)); unset: no listener and nothing recorded. `0` takes a free port. Must differ from `PORT`; the API port never serves `/metrics`', default: 'unset' },
  METRICS_HOST: { meaning: 'Address of the metrics listener; Kubernetes sets `0.0.0.0` so Prometheus reaches the pod (keep the port off any public Service or Ingress). Needs `METRICS_PORT`', default: '`127.0.0.1`' },
  PUBLIC_URL: { meaning: 'The service\'s own origin, used in links and as the default allowed origin', default: '`http://localhost:$PORT`' },
  LOG_LEVEL: { meaning: 'pino level: `fatal` … `trace`, or `silent`' },
  DATABASE_URL: { meaning: 'Postgres 14+ connection string; unset starts the embedded Postgres', default: 'unset' },
  DATABASE_POOL_MAX: { meaning: 'Connections per process for queries (pg-boss keeps its own few)' },
  MIGRATE_ON_START: { meaning: 'Apply pending migrations at start-up. `false` where migrations run once before a rollout (the Kubernetes migration Job, see [Run in production](operating.md#run-in-production)), so replicas never race for the migration lock; a process that finds migrations pending then logs them as a warning and starts', default: '`true`' },
  DATA_DIR: { meaning: 'Where the embedded Postgres keeps its cluster' },
  EMBEDDED_PG_PORT: { meaning: 'Loopback port of the embedded Postgres' },
  SESSION_COOKIE_NAME: { meaning: 'Name of the HttpOnly session cookie; with Secure cookies it and the CSRF cookie carry the `__Host-` prefix (`__Host-session`, `__Host-csrf_token`)' },
  SESSION_COOKIE_SECURE: { meaning: '`Secure` flag of the session cookies; `false` is refused in production', default: '`true` in production, else `false`' },
  SESSION_COOKIE_SAMESITE: { meaning: '`lax`, `strict` or `none` (`none` needs `SESSION_COOKIE_SECURE=true`)' },
  ALLOWED_ORIGINS: { meaning: 'Comma-separated origins allowed to send state-changing requests', default: '`PUBLIC_URL` and `WEB_APP_URL`' },
  RESPONSE_VALIDATION: { meaning: 'Check every response against the document; a mismatch answers 500 and is logged', default: 'on outside production' },
  APP_SECRET: { meaning: 'At least 32 random characters: signs CSRF tokens and seals secrets at rest (email bodies, SSO state, cluster credentials). Changing it signs everyone out', default: 'a public development value, only when `NODE_ENV` is `development` or `test` (required otherwise)' },
  TRUST_PROXY: { meaning: 'Express `trust proxy` (`true`, a hop count, a list of addresses or `loopback`) so client addresses for rate limits (sign-in throttling included) come from `X-Forwarded-For`; off, that header is ignored', default: '`false`' },
  SMTP_URL: { meaning: 'Outgoing email, e.g. `smtps://user:pass@smtp.example.com:465`; `make run` starts MailDev (local stand-in) when it is unset; the service itself needs it', default: 'unset (`node src/main.ts` refuses to start without it)' },
  MAIL_FROM: { meaning: 'Sender of every email' },
  EMAIL_RETRY_LIMIT: { meaning: 'Retries of an email the SMTP server refused or could not be reached for, before it is recorded as `failed` (with the delays below: an outage of about 6 hours delays mail, loses none)' },
  INVITATIONS_PER_DAY: { meaning: 'Invitation emails (created or resent) one organization may send in 24 hours; past it 429 `RATE_LIMITED` with `Retry-After`' },
  EMAIL_RETRY_DELAY_SECONDS: { meaning: 'First retry delay; it doubles at each retry' },
  EMAIL_RETRY_MAX_DELAY_SECONDS: { meaning: 'The longest wait between two retries of an email' },
  WEB_APP_URL: { meaning: 'The web app: links in emails (`/reset-password?token=…`, `/verify-email?token=…`, `/invitations/{token}`) and SSO landings point there', default: '`PUBLIC_URL`' },
  OIDC_ISSUER: { meaning: 'Issuer URL of the OpenID Connect provider for SSO (its discovery document is read from it); `https`, or `http` on a loopback host. Set it, `OIDC_CLIENT_ID` and `OIDC_CLIENT_SECRET` together, or none: SSO is off without them', default: 'unset' },
  OIDC_CLIENT_ID: { meaning: 'The service\'s client id at that provider', default: 'unset' },
  OIDC_CLIENT_SECRET: { meaning: 'The client\'s secret (sent to the token endpoint with HTTP Basic authentication)', default: 'unset' },
  OIDC_PROVIDER_NAME: { meaning: 'The provider\'s name: `/v1/sso/login/{name}`, the redirect URI to register at the provider (`PUBLIC_URL/v1/sso/callback/{name}`) and the sessions\' `auth_method`' },
  OIDC_DISPLAY_NAME: { meaning: 'The provider\'s `display_name` in `GET /v1/sso/providers`, for the sign-in button', default: 'the name, capitalized' },
  MAX_ACTIVE_RESOURCES: { meaning: 'Active deployments a new organization\'s billing account allows' },
  STRIPE_SECRET_KEY: { meaning: 'Stripe secret key (`sk_test_…`, `sk_live_…`); unset, `make run` starts the Stripe emulator (local stand-in). Needs the two below', default: 'unset' },
  STRIPE_PUBLISHABLE_KEY: { meaning: 'The matching `pk_…` key, handed to the web app', default: 'unset' },
  STRIPE_WEBHOOK_SECRET: { meaning: 'Signing secret (`whsec_…`) of the webhook endpoint created in Stripe for `PUBLIC_URL/v1/billing/webhook`', default: 'unset' },
  STRIPE_EVENT_DESTINATION_SECRET: { meaning: 'Signing secret (`whsec_…`) of the event destination of thin events created in Stripe for `PUBLIC_URL/v1/billing/event-notifications` (meter errors; see [Payments](billing.md#payments-stripe-and-the-stripe-emulator))', default: 'unset (`STRIPE_WEBHOOK_SECRET`)' },
  STRIPE_API_URL: { meaning: 'Points the SDK at another Stripe API host (`host`/`port`/`protocol`), such as an emulator started apart', default: 'unset (api.stripe.com)' },
  BILLING_ENFORCEMENT: { meaning: 'Creating a deployment needs a default card and an active subscription (409 `PAYMENT_SETUP_INCOMPLETE`), and so does calling a hosted model (429 `insufficient_quota`)', default: 'on when `STRIPE_SECRET_KEY` is set, off otherwise' },
  RECONCILE_INTERVAL_SECONDS: { meaning: 'How often the reconciler resumes stuck deployments and checks running ones on their engine' },
  DEPLOYMENT_STUCK_AFTER_SECONDS: { meaning: 'How long a provisioning step may go without progress before the reconciler resumes it' },
  DEPLOYMENT_START_TIMEOUT_SECONDS: { meaning: 'How long a model may load before the deployment fails at `health_check`' },
  READINESS_POLL_SECONDS: { meaning: 'How often a loading model\'s readiness is checked' },
  INFERENCE_CONNECT_TIMEOUT_SECONDS: { meaning: 'How long the proxy waits for an engine to accept the connection (504 `upstream_timeout` beyond)' },
  INFERENCE_FIRST_BYTE_TIMEOUT_SECONDS: { meaning: 'How long the proxy waits, once the whole request is sent, for the first byte of the engine\'s answer body (queueing and prefill included; 504 beyond)' },
  INFERENCE_IDLE_TIMEOUT_SECONDS: { meaning: 'Longest gap between two chunks of an answer (or of an upload to the engine); a stream then ends with an `upstream_timeout` error event, a JSON answer not started yet with 504' },
  DEPLOYMENT_RECOVERY_GRACE_SECONDS: { meaning: 'How long a running model may stay not ready on its engine (auto-recovery, which reloads the model) before the deployment fails at `health_check`; in production at least the start timeout', default: '`DEPLOYMENT_START_TIMEOUT_SECONDS`' },
  ENGINE_TIMEOUT_SECONDS: { meaning: 'Timeout of one management call to an engine (a DELETE may take 5 to 36 s)' },
  SHUTDOWN_TIMEOUT_MS: { meaning: 'How long SIGTERM waits for in-flight requests and jobs' },
  SHUTDOWN_DRAIN_SECONDS: { meaning: 'On SIGTERM, how long `/readyz` answers 503 while requests are still served, before the server closes (set it above the load balancer\'s readiness period, e.g. 5 in Kubernetes)' },
  EVENT_STREAM_HEARTBEAT_SECONDS: { meaning: 'How often an open deployment event stream sends a `: keep-alive` comment' },
  EVENT_STREAMS_PER_USER: { meaning: 'Deployment event streams one user may hold open in one API process; one more answers 429 `RATE_LIMITED`' },
  EVENT_STREAMS_PER_PROCESS: { meaning: 'Deployment event streams one API process holds open in all; one more answers 429 `RATE_LIMITED`' },
  WEBHOOK_ALLOW_PRIVATE_TARGETS: { meaning: 'Allow webhook URLs on loopback, private and other non-public addresses, and plain `http` (tests and closed networks only)', default: '`false`' },
  WEBHOOK_TIMEOUT_SECONDS: { meaning: 'Timeout of one webhook delivery attempt' },
  WEBHOOK_RETRY_LIMIT: { meaning: 'Retries of a failed webhook delivery before it fails for good' },
  WEBHOOK_RETRY_DELAY_SECONDS: { meaning: 'First retry delay; it doubles at each retry' },
  WEBHOOK_RETRY_MAX_DELAY_SECONDS: { meaning: 'The longest wait between two retries of a delivery' },
  WEBHOOK_DISABLE_AFTER_FAILURES: { meaning: 'Deliveries in a row that failed for good before an endpoint is disabled (its organization\'s admins emailed)' },
  USAGE_RETENTION_MONTHS: { meaning: 'Whole months of raw usage records kept after the month in progress (at least 2); older monthly partitions are dropped once their billable usage was reported (the usage summary reads hourly rollups, kept)' },
  USAGE_JOURNAL_DIR: { meaning: 'Where each process appends its usage records before the answers end (`src/inference/usage-journal.ts`); segments of a process that died are stored by the next one to start there. One directory per database and per machine (Kubernetes: the pod\'s `/tmp` `emptyDir`, which outlives a container\'s restart); never shared across machines. Created with mode 0700; one that is a symbolic link, another user\'s, or writable by its group or others is not used (error log with `alert: usage_journal_directory_refused`, answers then wait for the insert). Each line carries an HMAC under a key derived from `APP_SECRET`: a line without a valid one (a planted or altered segment) is not stored (`alert: usage_journal_forged`) and its segment is kept as `….jsonl.refused`. `off`: no journal, each complete answer waits for its usage\'s insert instead', default: 'a directory per database under the machine\'s temporary one (`$TMPDIR/usage-journal/<hash of the database\'s address>`)' },
  LIST_CACHE_MIN_ITEMS: { meaning: 'An organization\'s whole list (`GET /v1/organization/invitations`, `/api-keys`, `/api-keys/deployment-options`) of at least this many items is kept in the process and answered again, as the same bytes, while the organization\'s list version is unchanged (`src/organizations/list-cache.ts`; [Data at scale](performance.md#data-at-scale)). The suite keeps every list, so every list read after a change checks the kept copy', default: '`200` (`0` when `NODE_ENV=test`)' },
};
