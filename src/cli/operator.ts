/**
 * Operator commands (`npm run cli -- <command>`; USAGE lists them), against DATABASE_URL or else the
 * embedded Postgres of DATA_DIR. Registration checks the credentials against the engine before
 * storing anything. Secrets come from environment variables named by the flags, never the command
 * line, which shells and process lists keep. Exit codes: 0 done, 1 failed (one line on stderr),
 * 2 a usage error. The commands and their rules: docs/operating.md, Operator CLI.
 */
import { parseArgs } from 'node:util';
import type { Knex } from 'knex';
import { restrictModel, setModelEnabled } from '../catalog/catalog.repository.ts';
import { findBillingAccount } from '../billing/billing.repository.ts';
import { findPrice, listPrices, upsertPrice } from '../metering/metering.repository.ts';
import { formatCents } from '../metering/money.ts';
import type { PaymentProcessor } from '../billing/payment-processor.ts';
import { backfillInvoices, listInvoicesOf } from '../billing/processor-state.repository.ts';
import { usageSummary } from '../metering/usage-summary.ts';
import { InvalidPriceError, parseServiceKey, parseUnitAmount, type ServiceDimensions } from '../metering/service-keys.ts';
import { paymentProcessor } from '../adapters/stripe.ts';
import { INFERENCE_MODEL_TYPES, type InferenceModelType } from '../adapters/xinference.ts';
import { listClusters } from '../clusters/clusters.repository.ts';
import { launchHostedModels } from '../hosted/hosted-launch.ts';
import { listHostedEndpoints } from '../hosted/hosted-models.repository.ts';
import { ClusterRegistrationError, ClustersService, type ClusterAuth } from '../clusters/clusters.service.ts';
import { UsageReconciler } from '../billing/usage-reconciliation.ts';
import { ConfigError, loadConfig } from '../config.ts';
import { Keyring } from '../crypto.ts';
import { createDatabase, migrateToLatest } from '../db/database.ts';
import { isUniqueViolation } from '../db/errors.ts';
import { resolveDatabase } from '../db/resolve.ts';
import { createLogger } from '../logger.ts';

/** A command line the CLI cannot run as given (exit code 2). `showUsage`: print the whole usage after it. */
export class UsageError extends Error {
  readonly showUsage: boolean;
  constructor(message: string, options: { showUsage?: boolean } = {}) {
    super(message);
    this.showUsage = options.showUsage ?? false;
  }
}

export const USAGE = `Usage: npm run cli -- <command> [flags]      (or: node src/cli/operator.ts <command> [flags])

Runs against DATABASE_URL; without it, against the embedded Postgres of DATA_DIR (default .data):
the one \`make run\` is running, or one started for the command. Sealing credentials needs the
service's APP_SECRET; NODE_ENV=development uses make run's settings (its APP_SECRET included).

Commands:
  cluster register --name N --endpoint URL [--provider P] [--region R] [--hosted] [--insecure-http]
                   --admin-user U --admin-password-env VAR --api-key-env VAR
                                 register a cluster running Xinference's own authentication (the
                                 default, --auth advanced); the secrets are read from the variables named
  cluster register --name N --endpoint URL --auth none [...]
                                 register a cluster run with authentication off (network-isolated only)
  cluster check --name N         check the stored credentials again; a cluster that passes is active again
  cluster sync --name N          read the engine's workers and record them as instances (and its version, and
                                 whether it has the replica API of Xinference 3.2)
  cluster list                   name, provider/region, endpoint, auth mode, status (and why), engine version,
                                 replica API (or none, or unknown before the first sync)
  model enable --name M          make a catalog model deployable
  model disable --name M         make a catalog model not deployable
  model restrict --name M --organizations 1,2
                                 offer it only to these organizations ("all" lifts it)
  hosted launch [model...]       launch the catalog's hosted models (all, or those named) on every hosted cluster
  hosted list                    each hosted model's launch: cluster, engine model uid, state (and why)
  prices list                    every priced service: key, meter, unit price per unit, display name
  prices set <service_key> <unit_amount_decimal>
                                 set a service's price in USD per unit (adds the service if new)
  billing reconcile [--organization ID]
                                 compare the last 35 days of reported usage with the payment processor's
                                 meter summaries now (as the daily job does) and list the open differences
  billing reconcile --fix ID     correct one difference by the written rule (docs/billing.md, Reconciliation): a meter
                                 event, an invoice item on the next invoice, or a credit note
  billing reconcile --resolve ID --note TEXT
                                 record that a difference was settled outside the service (a credit note)
  billing invoices --organization ID
                                 an organization's invoices (synced from the processor's list first) beside
                                 its usage: the current period's meter lines, open anomalies and differences
  help, --help, -h               this text

Flags:
  --provider P (default self-hosted), --region R (default default), --auth advanced|none (default advanced),
  --hosted (a cluster for the hosted models), --insecure-http (allow http:// to a host that is not loopback)

Exit codes: 0 done, 1 failed (one line saying what), 2 the command line is wrong.
`;

/** The commands, as "<area> <action>". */
const COMMANDS = new Set([
  'cluster register',
  'cluster check',
  'cluster sync',
  'cluster list',
  'model enable',
  'model disable',
  'model restrict',
  'hosted launch',
  'hosted list',
  'prices list',
  'prices set',
  'billing reconcile',
  'billing invoices',
]);

const OPTIONS = {
  name: { type: 'string' },
  endpoint: { type: 'string' },
  provider: { type: 'string', default: 'self-hosted' },
  region: { type: 'string', default: 'default' },
  auth: { type: 'string', default: 'advanced' },
  'admin-user': { type: 'string' },
  'admin-password-env': { type: 'string' },
  'api-key-env': { type: 'string' },
  'insecure-http': { type: 'boolean', default: false },
  hosted: { type: 'boolean', default: false },
  organizations: { type: 'string' },
  organization: { type: 'string' },
  fix: { type: 'string' },
  resolve: { type: 'string' },
  note: { type: 'string' },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

/**
 * The command line read and checked against the commands and flags, without a database: `help` for
 * help (`help`, `--help`, `-h`); a UsageError (with the usage) for no command, an unknown one, or an
 * unknown or malformed flag.
 */
export function parseOperatorArgs(argv: string[]) {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, allowPositionals: true, strict: true, options: OPTIONS });
  } catch (error) {
    throw new UsageError((error as Error).message, { showUsage: true });
  }
  const { values, positionals } = parsed;
  const [area, action] = positionals;
  if (values.help || area === 'help') return { help: true as const, command: 'help', values, positionals };
  if (!area) throw new UsageError('no command given', { showUsage: true });
  const command = `${area} ${action ?? ''}`.trim();
  if (!COMMANDS.has(command)) throw new UsageError(`unknown command "${command}"`, { showUsage: true });
  return { help: false as const, command, values, positionals };
}

export async function runOperatorCommand(
  argv: string[],
  deps: { db: Knex; clusters: ClustersService; processor?: PaymentProcessor; reconciler?: UsageReconciler; env?: NodeJS.ProcessEnv },
): Promise<string> {
  const { help, values, positionals } = parseOperatorArgs(argv);
  if (help) return USAGE.trimEnd();
  const [area, action] = positionals;
  const name = () => {
    if (!values.name) throw new UsageError('--name is required');
    return values.name;
  };
  switch (`${area} ${action}`) {
    case 'cluster register': {
      if (!values.endpoint) throw new UsageError('--endpoint is required');
      const auth = clusterAuth(values, deps.env ?? process.env);
      const cluster = await deps.clusters.register({
        name: name(),
        endpoint: values.endpoint,
        provider: values.provider,
        region: values.region,
        auth,
        insecureHttp: values['insecure-http'],
        hosted: values.hosted,
      });
      const how = auth.mode === 'none' ? 'with authentication off (--auth none)' : `as ${auth.username}, its credentials checked and sealed`;
      return [`registered cluster ${cluster.name} (${cluster.id}) at ${cluster.endpoint} ${how}`, modelAccess(cluster.inferenceModelTypes)].join('\n');
    }
    case 'cluster check': {
      const cluster = await deps.clusters.check(name());
      return [`cluster ${cluster.name}: the engine accepts its credentials; status ${cluster.status}`, modelAccess(cluster.inferenceModelTypes)].join('\n');
    }
    case 'cluster sync': {
      const cluster = await deps.clusters.byName(name());
      if (!cluster) throw new UsageError(`no cluster is named ${name()}`);
      const result = await deps.clusters.sync(cluster.id);
      return [
        `engine version ${result.engineVersion}, ${replicaApi(result.replicaApi)}`,
        ...result.instances.map((i) => `instance ${i.worker}: ${i.instanceType} (${i.gpus} GPUs)`),
        ...result.unmatched.map((u) => `skipped ${u.worker}: ${u.reason}`),
        ...result.unavailable.map((worker) => `unavailable ${worker}: no longer reported by the engine`),
      ].join('\n');
    }
    case 'cluster list': {
      return (await listClusters(deps.db))
        .map((c) =>
          [
            c.name,
            `${c.provider}/${c.region}`,
            c.endpoint,
            `auth ${c.auth_mode}`,
            c.status_reason ? `${c.status}: ${c.status_reason}` : c.status,
            c.engine_version ?? 'version unknown',
            replicaApi(c.replica_api),
            ...(c.hosted ? ['hosted'] : []),
          ].join('\t'),
        )
        .join('\n');
    }
    case 'model enable':
    case 'model disable': {
      if (!(await setModelEnabled(deps.db, name(), action === 'enable'))) throw new UsageError(`no catalog model is named ${name()}`);
      return `${name()} is ${action === 'enable' ? 'enabled' : 'disabled'}`;
    }
    case 'model restrict': {
      const list = values.organizations;
      if (!list) throw new UsageError('--organizations is required (ids, comma-separated, or "all")');
      const ids = list === 'all' ? null : list.split(',').map((id) => Number(id.trim()));
      if (ids?.some((id) => !Number.isInteger(id) || id <= 0)) throw new UsageError('--organizations takes organization ids, e.g. 7,12');
      if (!(await restrictModel(deps.db, name(), ids))) throw new UsageError(`no catalog model is named ${name()}`);
      return ids ? `${name()} is offered only to organizations ${ids.join(', ')}` : `${name()} is offered to every organization`;
    }
    case 'hosted launch': {
      const outcomes = await launchHostedModels(deps, { models: positionals.slice(2) });
      return outcomes.map((o) => [o.model, o.cluster, o.state, ...(o.reason ? [o.reason] : [])].join('\t')).join('\n');
    }
    case 'hosted list': {
      return (await listHostedEndpoints(deps.db))
        .map((e) => [e.model_name, e.cluster_name, e.engine_model_uid, e.state_reason ? `${e.state}: ${e.state_reason}` : e.state].join('\t'))
        .join('\n');
    }
    case 'prices list': {
      return (await listPrices(deps.db))
        .map((p) => [p.service_key, p.meter, `${p.unit_amount_decimal} ${p.currency}/${p.unit}`, p.display_name].join('\t'))
        .join('\n');
    }
    case 'prices set': {
      const [, , key, amount, ...rest] = positionals;
      if (!key || !amount || rest.length) throw new UsageError('usage: prices set <service_key> <unit_amount_decimal>, e.g. prices set aws:us-east-1:gpu_instance:g5.xlarge:a10g:1 0.000279');
      const [dimensions, unitAmount] = priceInput(key, amount);
      const before = await findPrice(deps.db, key);
      const price = await upsertPrice(deps.db, dimensions, unitAmount).catch((error: unknown) => {
        if (!isUniqueViolation(error, 'prices_one_per_hosted_model')) throw error;
        throw new UsageError(`${dimensions.instance_type} already has a price under another key (see prices list): a hosted model has one price`);
      });
      const was = before ? `was ${before.unit_amount_decimal}` : 'a new service';
      return `price of ${price.service_key} (${price.display_name}) set to ${price.unit_amount_decimal} ${price.currency}/${price.unit} (${was})`;
    }
    case 'billing reconcile':
      return billingReconcile(values, deps.reconciler);
    case 'billing invoices':
      return billingInvoices(deps.db, values.organization, deps.processor);
    default:
      throw new UsageError(`unknown command "${area} ${action}"`, { showUsage: true });
  }
}

/** Whether a cluster's engine can scale a model by replicas (Xinference 3.2's replica API). */
function replicaApi(detected: boolean | null): string {
  if (detected === null) return 'replica API unknown';
  return detected ? 'replica API' : 'no replica API (Xinference before 3.2)';
}

/** `billing reconcile`: run and list, or fix, or resolve one difference. */
async function billingReconcile(values: ReturnType<typeof parseOperatorArgs>['values'], reconciler: UsageReconciler | undefined): Promise<string> {
  if (!reconciler) throw new Error('no payment processor is configured (STRIPE_SECRET_KEY, STRIPE_PUBLISHABLE_KEY, STRIPE_WEBHOOK_SECRET)');
  if (values.fix && values.resolve) throw new UsageError('--fix and --resolve are one at a time');
  if (values.fix) {
    const correction = await reconciler.correct(values.fix);
    if (correction.kind === 'none') return `difference ${values.fix} resolved: ${correction.value} millionths of a dollar is under half a cent`;
    const amount = correction.amountCents === undefined ? `${correction.value} millionths of a dollar` : `${formatCents(correction.amountCents)} USD`;
    return `difference ${values.fix} corrected: ${correction.kind.replace('_', ' ')} of ${amount} (${correction.identifier})`;
  }
  if (values.resolve) {
    if (!values.note) throw new UsageError('--resolve needs --note: what was done (e.g. "credit note CN-0042")');
    await reconciler.resolve(values.resolve, values.note);
    return `difference ${values.resolve} resolved`;
  }
  const organization = values.organization === undefined ? undefined : Number(values.organization);
  if (organization !== undefined && !Number.isInteger(organization)) throw new UsageError('--organization is an organization id');
  const outcome = await reconciler.run(createLogger('silent'));
  const open = await reconciler.open(organization);
  const lines = open.map((d) =>
    [d.id, d.organization_id, d.customer_id, d.meter, d.day, d.reported, d.at_processor, `${BigInt(d.at_processor) - BigInt(d.reported)}`].join('\t'),
  );
  const header = ['id', 'organization', 'customer', 'meter', 'day', 'reported', 'at_processor', 'processor_minus_reported'].join('\t');
  return [`compared ${outcome.compared} customer meters over the last 35 days: ${open.length} open differences (millionths of a dollar)`, ...(open.length ? [header, ...lines] : [])].join('\n');
}

/**
 * `billing invoices`: the organization's invoices, backfilled from the processor's list when there is
 * one, each with its lines, beside its usage of the current period (the usage summary's meter lines)
 * and what is open about it (anomalies, differences with the processor).
 */
async function billingInvoices(db: Knex, organization: string | undefined, processor: PaymentProcessor | undefined): Promise<string> {
  const organizationId = Number(organization);
  if (!organization || !Number.isInteger(organizationId)) throw new UsageError('--organization is required: an organization id');
  const account = await findBillingAccount(db, organizationId);
  if (!account) throw new Error(`organization ${organizationId} has no billing account`);
  const synced =
    processor && account.processor_customer_id
      ? `${await backfillInvoices(db, processor, { id: account.id, processor_customer_id: account.processor_customer_id })} synced from the processor`
      : 'not synced: no payment processor configured, or no customer';
  const invoices = await listInvoicesOf(db, account.id);
  const summary = await usageSummary(db, organizationId);
  const [differences] = await db('usage_differences').where({ organization_id: organizationId }).whereNull('resolved_at').count({ n: '*' });
  const money = (cents: string | number | null) => (cents === null ? '-' : `${formatCents(BigInt(cents))} ${account.currency}`);
  return [
    `organization ${organizationId}, customer ${account.processor_customer_id ?? '-'}: ${invoices.length} invoices (${synced})`,
    ...invoices.flatMap((invoice) => [
      [invoice.number ?? invoice.processor_invoice_id, invoice.status, `${invoice.period_start.toISOString()} – ${invoice.period_end.toISOString()}`, `subtotal ${money(invoice.subtotal)}`, `tax ${money(invoice.tax)}`, `total ${money(invoice.total)}`, `paid ${money(invoice.amount_paid)}`].join('\t'),
      ...invoice.lines.map((line) => `  ${line.description ?? line.processor_price_id ?? 'item'}\t${money(line.amount)}`),
    ]),
    `current period ${summary.period_start} – ${summary.period_end}: estimated ${summary.estimated_total} ${summary.estimated_total_currency}`,
    ...summary.meter_totals.map((line) => `  ${line.meter}\t${line.estimated_amount} ${line.estimated_amount_currency}`),
    `open anomalies ${summary.open_anomalies}, open differences with the processor ${Number(differences?.n ?? 0)} (billing reconcile)`,
  ].join('\n');
}

/** The checked dimensions and amount of `prices set`; a malformed one is a usage error saying what is wrong. */
function priceInput(key: string, amount: string): [ServiceDimensions, string] {
  try {
    return [parseServiceKey(key), parseUnitAmount(amount)];
  } catch (error) {
    if (error instanceof InvalidPriceError) throw new UsageError(error.message);
    throw error;
  }
}

/** The auth mode and credentials of `cluster register`, secrets read from the variables the flags name. */
/** What `cluster register`/`check` report of the inference key's model permissions. */
function modelAccess(types: readonly InferenceModelType[]): string {
  const refused = INFERENCE_MODEL_TYPES.filter((type) => !types.includes(type));
  if (!refused.length) return `the inference API key may call every model type (${types.join(', ')})`;
  return (
    `warning: the inference API key may call only ${types.join(', ')} models; the engine refuses it for ${refused.join(', ')} models, ` +
    'whose deployments on this cluster answer 502 upstream_error (give the key access to all models in Xinference)'
  );
}

function clusterAuth(values: Record<string, string | boolean | undefined>, env: NodeJS.ProcessEnv): ClusterAuth {
  const secret = (flag: string): string => {
    const variable = values[flag];
    if (typeof variable !== 'string' || !variable) throw new UsageError(`--${flag} is required: the name of the environment variable that holds it`);
    const value = env[variable];
    if (!value) throw new UsageError(`the environment variable ${variable} (--${flag}) is empty`);
    return value;
  };
  if (values.auth === 'none') {
    for (const flag of ['admin-user', 'admin-password-env', 'api-key-env']) {
      if (values[flag]) throw new UsageError(`--${flag} makes no sense with --auth none`);
    }
    return { mode: 'none' };
  }
  if (values.auth !== 'advanced') throw new UsageError('--auth is "advanced" (Xinference\'s own authentication, the default) or "none"');
  const username = values['admin-user'];
  if (typeof username !== 'string' || !username) {
    throw new UsageError('--admin-user is required: Xinference 3.x lets only a user with models:write and admin launch and stop models (or pass --auth none for a cluster run with authentication off)');
  }
  return { mode: 'advanced', username, password: secret('admin-password-env'), apiKey: secret('api-key-env') };
}

/**
 * The CLI: the command line is checked before anything else (help and usage errors need neither a
 * database nor APP_SECRET); every failure ends in one line on stderr naming what failed, no stack.
 */
async function main(argv: string[]): Promise<number> {
  let parsed: ReturnType<typeof parseOperatorArgs>;
  try {
    parsed = parseOperatorArgs(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`${error.message}\n\n${USAGE}`);
    return 2;
  }
  if (parsed.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig();
  } catch (error) {
    process.stderr.write(`${error instanceof ConfigError ? error.message.replace(/:?\n\s*/g, ': ') : oneLine(error)}\n`);
    return 1;
  }
  const log = createLogger('warn');
  const where = config.databaseUrl ? `DATABASE_URL (${redacted(config.databaseUrl)})` : `the embedded Postgres of DATA_DIR (${config.dataDir})`;
  let database: Awaited<ReturnType<typeof resolveDatabase>>;
  try {
    database = await resolveDatabase(config, createLogger('silent'), { useRunning: true });
  } catch (error) {
    process.stderr.write(`Cannot reach the database, ${where}: ${oneLine(error)}\n`);
    return 1;
  }
  // No logger for knex: its warnings (a connection refused, with a stack) would only repeat the failure reported below.
  const db = createDatabase({ url: database.url, poolMax: 2 });
  try {
    try {
      await migrateToLatest(db);
    } catch (error) {
      process.stderr.write(`Cannot use the database, ${where}: ${oneLine(error)}\n`);
      return 1;
    }
    const clusters = new ClustersService({
      db,
      keyring: new Keyring(config.appSecret),
      log,
      engineTimeoutSeconds: config.engineTimeoutSeconds,
      loadTimeoutSeconds: config.provisioning.startTimeoutSeconds,
    });
    const processor = paymentProcessor(config);
    const reconciler = processor ? new UsageReconciler(db, processor) : undefined;
    process.stdout.write(`${await runOperatorCommand(argv, { db, clusters, processor, reconciler })}\n`);
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(error.showUsage ? `${error.message}\n\n${USAGE}` : `${error.message}\n`);
      return 2;
    }
    process.stderr.write(`${error instanceof ClusterRegistrationError ? 'refused: ' : ''}${oneLine(error)}\n`);
    return 1;
  } finally {
    await db.destroy().catch(() => undefined);
    await database.stop().catch(() => undefined);
  }
}

/** An error's message on one line (its causes after it), without the stack. */
function oneLine(error: unknown): string {
  const parts: string[] = [];
  for (let cause: unknown = error; cause !== undefined && parts.length < 3; cause = (cause as { cause?: unknown }).cause) {
    const message = cause instanceof Error ? cause.message : String(cause);
    if (message && !parts.includes(message)) parts.push(message);
  }
  return parts.join(': ').replace(/\s*\n\s*/g, ' ');
}

/** A database URL with its password hidden. */
function redacted(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return 'malformed';
  }
}

if (import.meta.main) {
  process.exitCode = await main(process.argv.slice(2));
}
