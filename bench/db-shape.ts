import type { Budget } from './report.ts';

/**
 * The pure parts of the data-scale benchmark (bench/db-scale.ts): its settings and the shape of the
 * data it seeds, percentiles, the compact form of an EXPLAIN plan, the data-scale budgets and the
 * table. No I/O here (test/unit/db-bench.test.ts).
 */

/** What the seeded database holds. Every count is at scale 1 times BENCH_DB_SCALE unless set on its own. */
export interface Shape {
  scale: number;
  users: number;
  deployments: number;
  /** Deployments of the heavy user (user 1, in organization 1), a long-lived automation account. */
  heavyDeployments: number;
  /** Of the heavy user's deployments, those not terminated (running, and a fifth of them failed). */
  heavyActiveShare: number;
  usageRows: number;
  /** Share of the usage rows that belong to the heavy organization. */
  heavyUsageShare: number;
  /** Share of the usage rows through a dedicated deployment (the rest are hosted-model tokens). */
  deploymentUsageShare: number;
  /** Closed one-minute GPU intervals of running deployments, half of them the heavy organization's. */
  gpuIntervals: number;
  heavyMembers: number;
  heavyApiKeys: number;
  heavyInvitations: number;
  heavyWebhookAttempts: number;
  /** Days the usage rows span, ending now. */
  usageDays: number;
  /** The deep page of the heavy user's deployment list (100,000 at scale 1). */
  deepOffset: number;
}

/** How the run measures. */
export interface RunSettings {
  /** Calls per route and user after the warm-up (fewer when a route's time runs out first). */
  calls: number;
  /** Calls of every route before any is measured (the service's code warmed up, its caches filled). */
  warmupCalls: number;
  /** Longest time spent on one route for one user, seconds: a route that takes seconds a call stops early. */
  routeSeconds: number;
  /** Seconds of inserting usage rows per round and batch size. */
  insertSeconds: number;
  /** Rounds per batch size, each from a checkpoint; the best one counts. */
  insertRounds: number;
  insertBatches: number[];
  /**
   * The churn phase (BENCH_DB_CHURN, on by default): every session route of the heavy and the typical
   * user timed again, each call after a committed status change of one of its organization's
   * deployments.
   */
  churn: boolean;
  /** Rows per seeding statement. */
  seedBatchRows: number;
  /**
   * Only the routes whose `<who>: <route>` contains one of these (BENCH_DB_ROUTES, comma-separated):
   * a quick look at a few routes, without plans, inserts or results written. All when undefined.
   */
  routes?: string[];
  /** Keep the database afterwards (on a server only), to measure it again with BENCH_DB_REUSE. */
  keep: boolean;
  /** An existing, seeded database on the server to measure again (no seeding). */
  reuse: string | undefined;
}

export interface Settings {
  shape: Shape;
  run: RunSettings;
}

/** The settings the benchmark reads: environment variable, CLI flag (`--scale 0.001` or `--scale=0.001`), what it sets. */
export const SETTINGS_HELP: ReadonlyArray<[env: string, description: string]> = [
  ['BENCH_DB_SCALE', 'multiplies every count of the shape (default 1; 0.001 seeds in seconds)'],
  ['BENCH_DB_USERS', 'users, each owning an organization (10,000)'],
  ['BENCH_DB_DEPLOYMENTS', 'deployments (1,000,000)'],
  ['BENCH_DB_HEAVY_DEPLOYMENTS', "the heavy user's deployments (200,000)"],
  ['BENCH_DB_HEAVY_ACTIVE_SHARE', "share of the heavy user's deployments not terminated (0.005)"],
  ['BENCH_DB_USAGE_ROWS', 'usage_records rows over the last BENCH_DB_USAGE_DAYS days (20,000,000)'],
  ['BENCH_DB_HEAVY_USAGE_SHARE', "the heavy organization's share of them (0.5)"],
  ['BENCH_DB_DEPLOYMENT_USAGE_SHARE', 'share of usage rows through a dedicated deployment, the rest hosted-model tokens (0.1)'],
  ['BENCH_DB_USAGE_DAYS', 'days the usage spans, up to now (30)'],
  ['BENCH_DB_GPU_INTERVALS', 'one-minute GPU intervals of running deployments (1,000,000)'],
  ['BENCH_DB_HEAVY_MEMBERS', "members of the heavy organization besides its owner (200)"],
  ['BENCH_DB_HEAVY_API_KEYS', 'API keys of the heavy organization, most revoked (1,000)'],
  ['BENCH_DB_HEAVY_INVITATIONS', 'invitations of the heavy organization, most answered (2,000)'],
  ['BENCH_DB_HEAVY_WEBHOOK_ATTEMPTS', "delivery attempts of the heavy organization's webhook endpoint (100,000)"],
  ['BENCH_DB_DEEP_OFFSET', "the deep page of the heavy user's list (100,000 at scale 1)"],
  ['BENCH_DB_CALLS', 'calls per route and user (200)'],
  ['BENCH_DB_WARMUP_CALLS', 'calls of every route, in a first pass over all of them, before any is measured (20)'],
  ['BENCH_DB_ROUTE_SECONDS', 'at most this long per route and user, seconds (20)'],
  ['BENCH_DB_INSERT_SECONDS', 'inserting usage rows, seconds per round and batch size (5)'],
  ['BENCH_DB_INSERT_ROUNDS', 'rounds per batch size, each from a CHECKPOINT; the best counts (3)'],
  ['BENCH_DB_INSERT_BATCHES', 'batch sizes of the insert measurement (1,50,500)'],
  ['BENCH_DB_SEED_BATCH_ROWS', 'rows per seeding statement (1,000,000)'],
  ['BENCH_DB_CHURN', 'the churn phase: every session route timed again, each call after a status change of one of the caller organization\'s deployments (on; 0 skips it)'],
  ['BENCH_DB_ROUTES', 'only the routes whose "<who>: <route>" contains one of these, comma-separated (e.g. "heavy: GET /v1/billing"); no plans, inserts or results written'],
  ['BENCH_DB_KEEP', '1: keep the database afterwards (on a server), for BENCH_DB_REUSE'],
  ['BENCH_DB_REUSE', 'name of a database a kept run seeded: measure it again, no seeding'],
];

export class SettingsError extends Error {}

/** `--scale 0.001`, `--heavy-deployments=5000` → BENCH_DB_SCALE, BENCH_DB_HEAVY_DEPLOYMENTS; flags win over the environment. */
export function flagsToEnv(argv: readonly string[]): Record<string, string> {
  const known = new Set(SETTINGS_HELP.map(([name]) => name));
  const out: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '--help' || arg === '-h') throw new SettingsError('Usage: node bench/db-scale.ts [--flag value ...] (or make bench-db BENCH_DB_ARGS="..." / BENCH_DB_*=...)');
    if (!arg.startsWith('--')) throw new SettingsError(`unexpected argument ${JSON.stringify(arg)} (flags are --name value)`);
    const eq = arg.indexOf('=');
    const flag = eq > 0 ? arg.slice(2, eq) : arg.slice(2);
    const name = `BENCH_DB_${flag.replace(/-/g, '_').toUpperCase()}`;
    if (!known.has(name)) throw new SettingsError(`unknown flag --${flag} (known: ${[...known].map((env) => `--${env.slice(9).toLowerCase().replace(/_/g, '-')}`).join(', ')})`);
    const value = eq > 0 ? arg.slice(eq + 1) : argv[++i];
    if (value === undefined) throw new SettingsError(`--${flag} needs a value`);
    out[name] = value;
  }
  return out;
}

export function readSettings(env: Record<string, string | undefined>): Settings {
  const number = (name: string, fallback: number, check: (value: number) => boolean, what: string): number => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw.replace(/_/g, ''));
    if (!Number.isFinite(value) || !check(value)) throw new SettingsError(`${name} must be ${what}, got ${JSON.stringify(raw)}`);
    return value;
  };
  const scale = number('BENCH_DB_SCALE', 1, (v) => v > 0 && v <= 10, 'a number in (0, 10]');
  const count = (name: string, atScaleOne: number, min: number) =>
    number(name, Math.max(min, Math.round(atScaleOne * scale)), (v) => Number.isInteger(v) && v >= min, `an integer >= ${min}`);
  const share = (name: string, fallback: number) => number(name, fallback, (v) => v >= 0 && v <= 1, 'a share between 0 and 1');

  const users = count('BENCH_DB_USERS', 10_000, 3);
  const deployments = count('BENCH_DB_DEPLOYMENTS', 1_000_000, users);
  const heavyDeployments = count('BENCH_DB_HEAVY_DEPLOYMENTS', 200_000, 1);
  if (heavyDeployments >= deployments) throw new SettingsError(`the heavy user's deployments (${heavyDeployments}) must be fewer than all deployments (${deployments})`);
  const shape: Shape = {
    scale,
    users,
    deployments,
    heavyDeployments,
    heavyActiveShare: share('BENCH_DB_HEAVY_ACTIVE_SHARE', 0.005),
    usageRows: count('BENCH_DB_USAGE_ROWS', 20_000_000, 0),
    heavyUsageShare: share('BENCH_DB_HEAVY_USAGE_SHARE', 0.5),
    deploymentUsageShare: share('BENCH_DB_DEPLOYMENT_USAGE_SHARE', 0.1),
    usageDays: number('BENCH_DB_USAGE_DAYS', 30, (v) => Number.isInteger(v) && v >= 1 && v <= 365, 'an integer from 1 to 365'),
    gpuIntervals: count('BENCH_DB_GPU_INTERVALS', 1_000_000, 0),
    heavyMembers: Math.min(users - 2, count('BENCH_DB_HEAVY_MEMBERS', 200, 1)),
    heavyApiKeys: count('BENCH_DB_HEAVY_API_KEYS', 1_000, 2),
    heavyInvitations: count('BENCH_DB_HEAVY_INVITATIONS', 2_000, 2),
    heavyWebhookAttempts: count('BENCH_DB_HEAVY_WEBHOOK_ATTEMPTS', 100_000, 10),
    deepOffset: 0,
  };
  shape.deepOffset = Math.min(count('BENCH_DB_DEEP_OFFSET', 100_000, 1), Math.max(1, heavyDeployments - 1));

  const batches = (env.BENCH_DB_INSERT_BATCHES || '1,50,500').split(',').map((part) => Number(part.trim()));
  if (!batches.length || batches.some((size) => !Number.isInteger(size) || size < 1 || size > 10_000)) {
    throw new SettingsError(`BENCH_DB_INSERT_BATCHES must be sizes from 1 to 10000, comma-separated, got ${JSON.stringify(env.BENCH_DB_INSERT_BATCHES)}`);
  }
  const run: RunSettings = {
    calls: number('BENCH_DB_CALLS', 200, (v) => Number.isInteger(v) && v >= 1, 'an integer >= 1'),
    warmupCalls: number('BENCH_DB_WARMUP_CALLS', 20, (v) => Number.isInteger(v) && v >= 0, 'an integer >= 0'),
    routeSeconds: number('BENCH_DB_ROUTE_SECONDS', 20, (v) => v > 0, 'a number > 0'),
    insertSeconds: number('BENCH_DB_INSERT_SECONDS', 5, (v) => v > 0, 'a number > 0'),
    insertRounds: number('BENCH_DB_INSERT_ROUNDS', 3, (v) => Number.isInteger(v) && v >= 1, 'an integer >= 1'),
    insertBatches: batches,
    churn: !['0', 'false', 'off', 'no'].includes((env.BENCH_DB_CHURN ?? '').toLowerCase()),
    seedBatchRows: number('BENCH_DB_SEED_BATCH_ROWS', 1_000_000, (v) => Number.isInteger(v) && v >= 1000, 'an integer >= 1000'),
    ...(env.BENCH_DB_ROUTES ? { routes: env.BENCH_DB_ROUTES.split(',').map((part) => part.trim()).filter(Boolean) } : {}),
    keep: ['1', 'true', 'on', 'yes'].includes((env.BENCH_DB_KEEP ?? '').toLowerCase()),
    reuse: env.BENCH_DB_REUSE || undefined,
  };
  return { shape, run };
}

/** The derived counts the seeding and the report use. */
export function derived(shape: Shape) {
  const heavyActive = Math.max(1, Math.round(shape.heavyDeployments * shape.heavyActiveShare));
  const heavyFailed = Math.floor(heavyActive / 5);
  const heavyRunning = Math.max(1, heavyActive - heavyFailed);
  const typicalUsers = shape.users - 1;
  const typicalDeployments = shape.deployments - shape.heavyDeployments;
  /** Each typical user's deployments: one in 40 running, one in 40 failed, the rest terminated; at least one running. */
  const perTypicalUser = typicalDeployments / typicalUsers;
  const typicalRunning = Math.max(typicalUsers, Math.round(typicalDeployments / 40));
  const heavyUsageRows = Math.round(shape.usageRows * shape.heavyUsageShare);
  const heavyIntervals = Math.round(shape.gpuIntervals / 2);
  return {
    heavyActive,
    heavyRunning,
    heavyFailed,
    typicalUsers,
    typicalDeployments,
    perTypicalUser,
    typicalRunning,
    heavyUsageRows,
    /** Minutes each running deployment has run (its closed one-minute intervals), heavy organization and others. */
    heavyMinutesRunning: Math.round(heavyIntervals / heavyRunning),
    typicalMinutesRunning: Math.round((shape.gpuIntervals - heavyIntervals) / typicalRunning),
  };
}

/** Nearest-rank percentile (`q` in (0, 1]) of `values`; NaN when there are none. */
export function percentile(values: readonly number[], q: number): number {
  if (!values.length) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil(q * sorted.length)));
  return sorted[rank - 1] as number;
}

/** One node of EXPLAIN (FORMAT JSON), as far as the compact shape reads it. */
export interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Parent Relationship'?: string;
  Strategy?: string;
  'Sort Method'?: string;
  'Sort Space Used'?: number;
  'Sort Space Type'?: string;
  'Workers Planned'?: number;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Actual Total Time'?: number;
  'Plan Rows'?: number;
  'Subplan Name'?: string;
  Plans?: PlanNode[];
}

const SCANS = new Set(['Seq Scan', 'Parallel Seq Scan', 'Index Scan', 'Index Only Scan', 'Bitmap Heap Scan', 'Bitmap Index Scan']);

/** Rows a node produced over all its loops (EXPLAIN ANALYZE), or what the planner expected. */
function rowsOf(node: PlanNode): string {
  if (node['Actual Rows'] !== undefined) {
    const total = node['Actual Rows'] * (node['Actual Loops'] ?? 1);
    return `${compactCount(total)} rows`;
  }
  return node['Plan Rows'] !== undefined ? `~${compactCount(node['Plan Rows'])} rows` : '';
}

export function compactCount(n: number): string {
  if (n >= 1_000_000) return `${(n / 1_000_000).toFixed(n >= 10_000_000 ? 0 : 1)}M`;
  if (n >= 10_000) return `${Math.round(n / 1000)}k`;
  return String(Math.round(n));
}

/**
 * A plan in one line: each node its type, the index or table it reads, what matters about it (sort
 * method and spill, workers, rows scanned), children in brackets; `>` when a node has one child.
 * E.g. `Limit > Index Scan deployments_by_owner (100k rows)`.
 */
export function planShape(node: PlanNode): string {
  let label = node['Node Type'];
  if (node['Node Type'] === 'Aggregate' && node.Strategy && node.Strategy !== 'Plain') label = `${node.Strategy === 'Hashed' ? 'Hash' : node.Strategy} Aggregate`;
  if (node['Subplan Name']) label = `${node['Subplan Name']}: ${label}`;
  const details: string[] = [];
  if (node['Index Name']) label += ` ${node['Index Name']}`;
  else if (node['Relation Name'] && SCANS.has(node['Node Type'])) label += ` ${node['Relation Name']}`;
  if (node['Workers Planned'] !== undefined) details.push(`${node['Workers Planned']} workers`);
  if (node['Sort Method']) details.push(`${node['Sort Method']}${node['Sort Space Type'] === 'Disk' ? `, ${Math.round((node['Sort Space Used'] ?? 0) / 1024)} MB on disk` : ''}`);
  if (SCANS.has(node['Node Type'])) {
    const rows = rowsOf(node);
    if (rows) details.push(rows);
  }
  if (details.length) label += ` (${details.join(', ')})`;
  const children = node.Plans ?? [];
  if (!children.length) return label;
  if (children.length === 1) return `${label} > ${planShape(children[0] as PlanNode)}`;
  return `${label} [${children.map(planShape).join('; ')}]`;
}

/** Whether a plan reads a table whole or sorts on disk: the two things that make a page slow at scale. */
export function planWarnings(node: PlanNode): string[] {
  const nodes = (n: PlanNode): PlanNode[] => [n, ...(n.Plans ?? []).flatMap(nodes)];
  const warnings = new Set<string>();
  for (const n of nodes(node)) {
    if ((n['Node Type'] === 'Seq Scan' || n['Node Type'] === 'Parallel Seq Scan') && n['Relation Name']) warnings.add(`sequential scan of ${n['Relation Name']}`);
    if (n['Sort Space Type'] === 'Disk') warnings.add('sort on disk');
  }
  return [...warnings];
}

/** One measured route for one user. */
export interface RouteTiming {
  /** `typical`, `heavy`, `api key (heavy org)` or `anonymous`. */
  who: string;
  route: string;
  /** What the budget holds it to: a first page, the deep page, or the usage summary of the heavy organization. */
  kind: 'first' | 'deep' | 'usage-summary-heavy';
  calls: number;
  p50: number;
  p99: number;
  max: number;
  /** Statuses other than the one expected, with counts. */
  unexpected: Record<string, number>;
  /** Items in the answer's list (`items` or an array), when it is one. */
  items?: number;
  note?: string;
}

/** The data-scale budgets, ms at p99. */
export const LIMITS = { first: 10, deep: 25, 'usage-summary-heavy': 20 } as const;

export interface InsertRate {
  batch: number;
  /** Where: `empty` (before the usage rows were seeded) or `seeded`. */
  table: 'empty' | 'seeded';
  rows: number;
  seconds: number;
  rowsPerSecond: number;
  /** Per batch, ms. */
  p50: number;
  p99: number;
  /** Whether the measurement started from a CHECKPOINT (it needs the right to run one). */
  checkpointed?: boolean;
  /** rows/s of each round; the figures above are the best round's. */
  rounds?: number[];
}

/** Each route's verdict, then the insert rates against the reference run (a committed result at the same shape), when there is one. */
export function dbBudgets(timings: readonly RouteTiming[], inserts: readonly InsertRate[], reference: readonly InsertRate[] | undefined): Budget[] {
  const list: Budget[] = timings.map((timing) => {
    const limit = LIMITS[timing.kind];
    const failed = Object.keys(timing.unexpected).length > 0;
    return {
      name: `${timing.who}: ${timing.route}`,
      limit: `p99 <= ${limit} ms`,
      value: timing.p99,
      unit: 'ms',
      met: Number.isNaN(timing.p99) ? undefined : !failed && timing.p99 <= limit,
    };
  });
  for (const rate of inserts.filter((insert) => insert.table === 'seeded')) {
    const before = reference?.find((r) => r.batch === rate.batch && r.table === 'seeded');
    const bound = before ? before.rowsPerSecond * INSERT_NOISE : undefined;
    list.push({
      name: `insert usage rows, batches of ${rate.batch}`,
      limit: bound === undefined ? '>= reference (none yet)' : `>= ${Math.round(bound)} rows/s`,
      value: rate.rowsPerSecond,
      unit: 'rows/s',
      met: bound === undefined ? undefined : rate.rowsPerSecond >= bound,
    });
  }
  return list;
}

/** "At least as fast as today", read with the noise of a shared 2-core machine: 90 % of the reference run's rate. */
export const INSERT_NOISE = 0.9;

const ms = (value: number) => (Number.isNaN(value) ? '–' : value.toFixed(2));

/** The route table: route, then p50 / p99 (ms) for each user, ✗ where the budget is missed, the calls when fewer than `calls`. */
export function routeTable(timings: readonly RouteTiming[], calls: number): string[][] {
  const whos = [...new Set(timings.map((timing) => timing.who))];
  // Routes in the order of the caller with the most of them (the heavy user's list has the deep pages in place).
  const byCaller = whos.map((who) => timings.filter((timing) => timing.who === who).map((timing) => timing.route)).sort((a, b) => b.length - a.length);
  const routes = [...new Set(byCaller.flat())];
  const out: string[][] = [['route', ...whos.map((who) => `${who} p50 / p99 ms`)]];
  for (const route of routes) {
    out.push([
      route,
      ...whos.map((who) => {
        const timing = timings.find((t) => t.who === who && t.route === route);
        if (!timing) return '';
        const failed = Object.entries(timing.unexpected).map(([status, n]) => `${n}× ${status}`).join(', ');
        const flag = timing.p99 > LIMITS[timing.kind] || failed ? ' ✗' : '';
        return `${ms(timing.p50)} / ${ms(timing.p99)}${flag}${timing.calls < calls ? ` (${timing.calls} calls)` : ''}${failed ? ` [${failed}]` : ''}`;
      }),
    ]);
  }
  return out;
}

/** Whether the deployment list takes a keyset cursor (`after`) in this OpenAPI document. */
export function deploymentListHasCursor(document: unknown): boolean {
  const doc = document as { paths?: Record<string, { get?: { parameters?: unknown[] } }>; components?: { parameters?: Record<string, unknown> } };
  const parameters = doc.paths?.['/api/v1/model-deployments']?.get?.parameters ?? [];
  return parameters.some((parameter) => {
    let resolved = parameter as { $ref?: string; name?: string; in?: string };
    if (resolved.$ref?.startsWith('#/components/parameters/')) resolved = (doc.components?.parameters?.[resolved.$ref.slice('#/components/parameters/'.length)] ?? {}) as typeof resolved;
    return resolved.name === 'after' && resolved.in === 'query';
  });
}

/** How many items a list answer holds (`items`, `data`, or the array itself). */
export function itemsIn(body: unknown): number | undefined {
  if (Array.isArray(body)) return body.length;
  if (body && typeof body === 'object') {
    for (const key of ['items', 'data', 'usage_totals', 'providers']) {
      const value = (body as Record<string, unknown>)[key];
      if (Array.isArray(value)) return value.length;
    }
  }
  return undefined;
}

/**
 * The statement a knex `query` event carries, with pg's `$n` placeholders: builder queries come
 * with them already, raw ones (named or `?` bindings) with `?` still in place.
 */
export function withPgPlaceholders(sql: string): string {
  if (/\$\d+/.test(sql)) return sql;
  let n = 0;
  return sql.replace(/\?/g, () => `$${++n}`);
}
