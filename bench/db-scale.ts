/**
 * Data-scale benchmark (`make bench-db`): the service's read routes and its usage inserts
 * against a database holding a million deployments and twenty million usage rows, held to the
 * data-scale budgets (docs/performance.md). Never part of `make test`.
 *
 * One run:
 *  1. `make build` first (the Makefile target depends on it): the service runs as in production;
 *  2. a fresh database: on the server of DATABASE_URL, else on the machine's Postgres at
 *     127.0.0.1:5432 when it answers, else an embedded Postgres in a temporary directory (never the
 *     `postgres` database itself); the real migrations (which seed the catalog and its prices);
 *  3. the shape (bench/db-shape.ts, BENCH_DB_* or flags; BENCH_DB_SCALE=0.001 runs in a minute),
 *     seeded set-based in batches with progress (bench/db-seed.ts), the heavy and a typical user
 *     given real passwords, then VACUUM ANALYZE; the usage insert rate measured once before the usage
 *     rows went in (`empty`) and once after (`seeded`), through the service's own insert
 *     (`insertUsageRecords`) in batches as the group commit sends them;
 *  4. the service (`node dist/main.js`, ROLE=api) on that database; both users sign in through the
 *     API, create an API key (and the heavy one a webhook endpoint, whose delivery attempts are then
 *     seeded); every read route of the interface timed through HTTP with the session cookie or the
 *     key: p50/p99 of BENCH_DB_CALLS calls (200) after a warm-up, one call after the other, at most
 *     BENCH_DB_ROUTE_SECONDS per route; the deployment list at its first page and, for the heavy user,
 *     at BENCH_DB_DEEP_OFFSET (100,000), and through the keyset cursor (`after`) when
 *     generated/openapi.json has it;
 *     then, unless BENCH_DB_CHURN=0, every route of both users again, each call after a committed
 *     status change of one of the caller organization's running deployments (the churn phase);
 *  5. EXPLAIN (ANALYZE) of the hot queries, as the repositories build them, in one line each;
 *  6. one table, each budget met or missed, bench/results/db-<timestamp>.json and db-latest.md.
 *
 * It exits 0 whenever it could measure, budgets missed or not. Every process it starts is stopped at
 * the end, and the database dropped (BENCH_DB_KEEP=1 keeps it on a server, BENCH_DB_REUSE=<name>
 * measures a kept one again without seeding), also on failure or Ctrl-C. BENCH_DB_ROUTES times a few
 * routes only; BENCH_CPU_PROF_DIR has the service write a CPU profile there.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Knex } from 'knex';
import pg from 'pg';
import { hashPassword } from '../src/accounts/passwords.ts';
import { createDatabase, migrateToLatest } from '../src/db/database.ts';
import { ApiClient } from './api-client.ts';
import { TimingClient, type TimedAnswer } from './timing-client.ts';
import { elapsed, seed, seededIn, type Seeded } from './db-seed.ts';
import {
  LIMITS,
  SETTINGS_HELP,
  SettingsError,
  dbBudgets,
  deploymentListHasCursor,
  flagsToEnv,
  itemsIn,
  percentile,
  planShape,
  planWarnings,
  readSettings,
  routeTable,
  withPgPlaceholders,
  type InsertRate,
  type PlanNode,
  type RouteTiming,
  type Settings,
} from './db-shape.ts';
import { ROOT, productionServiceEnv, startService } from './processes.ts';
import { RESULTS, machineName, markdown, out, printReport, resultHead, step, textBudgets, textTable, writeResults } from './report.ts';
import { benchRun, type BenchRun } from './run.ts';

const fmt = (n: number) => Math.round(n).toLocaleString('en');

// ---- inserting usage rows as the service does

async function insertRates(url: string, organizationId: number, table: InsertRate['table'], settings: Settings): Promise<InsertRate[]> {
  // The service's usage pool: its own connections, commits not waiting for the disk (src/runtime.ts).
  const db = createDatabase({ url, poolMax: 2, synchronousCommit: false });
  const { insertUsageRecords } = await import('../src/inference/inference.repository.ts');
  const rates: InsertRate[] = [];
  try {
    for (const batch of settings.run.insertBatches) {
      const rounds: InsertRate[] = [];
      for (let round = 0; round < settings.run.insertRounds; round++) rounds.push(await insertRound(db, insertUsageRecords, organizationId, table, batch, settings));
      // The best round: what else runs on the machine only ever slows a round down.
      const best = rounds.reduce((a, b) => (b.rowsPerSecond > a.rowsPerSecond ? b : a));
      rates.push({ ...best, rounds: rounds.map((round) => Math.round(round.rowsPerSecond)) });
    }
  } finally {
    await db.destroy();
  }
  return rates;
}

/** One round of inserting batches of `batch` rows for BENCH_DB_INSERT_SECONDS. */
async function insertRound(
  db: Knex,
  insertUsageRecords: (db: Knex, records: never[]) => Promise<void>,
  organizationId: number,
  table: InsertRate['table'],
  batch: number,
  settings: Settings,
): Promise<InsertRate> {
  // Each round starts right after a checkpoint, so each pays the same full-page writes of the
  // index pages it touches first (whatever the previous one or the seeding left dirty): comparable runs.
  const checkpointed = await db.raw('checkpoint').then(
    () => true,
    () => false,
  );
  const perBatch: number[] = [];
  let rows = 0;
  const started = performance.now();
  while (performance.now() - started < settings.run.insertSeconds * 1000) {
    const records = Array.from({ length: batch }, (_, i) => {
      const prompt = 20 + ((rows + i) % 2000);
      return {
        usage_id: randomUUID(),
        request_id: `req_${randomUUID().replaceAll('-', '')}`,
        organization_id: organizationId,
        deployment_id: null,
        api_key_id: null,
        user_id: null,
        route: '/v1/chat/completions',
        model: 'qwen2.5-instruct',
        prompt_tokens: prompt,
        completion_tokens: 100,
        total_tokens: prompt + 100,
        unit: 'token' as const,
        quantity: prompt + 100,
        outcome: 'completed' as const,
        estimated: false,
        // Stamped by the service where the table is keyed by it (a newer insert reads it; an older one ignores it).
        created_at: new Date(),
      };
    });
    const t0 = performance.now();
    await insertUsageRecords(db, records as never[]);
    perBatch.push(performance.now() - t0);
    rows += batch;
  }
  const seconds = (performance.now() - started) / 1000;
  return { batch, table, rows, seconds, rowsPerSecond: rows / seconds, p50: percentile(perBatch, 0.5), p99: percentile(perBatch, 0.99), checkpointed };
}

const insertLine = (rate: InsertRate) =>
  `  batches of ${String(rate.batch).padStart(4)}: ${fmt(rate.rowsPerSecond).padStart(7)} rows/s (best of ${rate.rounds?.map(fmt).join(', ') ?? '1'}; ${fmt(rate.rows)} rows in ${rate.seconds.toFixed(1)} s, a batch p50 ${rate.p50.toFixed(2)} ms, p99 ${rate.p99.toFixed(2)} ms)`;

/** The insert rates of the first run in bench/results at the same shape: "today's", to compare with. */
function referenceRun(settings: Settings): { file: string; commit: string; inserts: InsertRate[] } | undefined {
  if (!existsSync(RESULTS)) return undefined;
  const files = readdirSync(RESULTS).filter((file) => /^db-.*\.json$/.test(file)).sort();
  for (const file of files) {
    try {
      const run = JSON.parse(readFileSync(path.join(RESULTS, file), 'utf8')) as { shape?: unknown; commit?: string; inserts?: InsertRate[] };
      if (JSON.stringify(run.shape) === JSON.stringify(settings.shape) && run.inserts?.length) return { file, commit: run.commit ?? 'unknown', inserts: run.inserts };
    } catch {
      // Not a result of this benchmark.
    }
  }
  return undefined;
}

/**
 * Runs the service's fold of usage rollup deltas (`compactUsageRollups` in src/metering/usage-rollups.ts)
 * when the code has one; undefined when it has not. Imported by a computed path: the module is newer
 * than this benchmark may be.
 */
async function foldUsageRollups(url: string): Promise<{ count: number; seconds: number } | undefined> {
  const modulePath = path.join(ROOT, 'src', 'billing', 'usage-rollups.ts');
  if (!existsSync(modulePath)) return undefined;
  const module = (await import(modulePath)) as { compactUsageRollups?: (db: Knex) => Promise<number> };
  if (typeof module.compactUsageRollups !== 'function') return undefined;
  const db = createDatabase({ url, poolMax: 1 });
  const started = performance.now();
  try {
    return { count: await module.compactUsageRollups(db), seconds: (performance.now() - started) / 1000 };
  } finally {
    await db.destroy();
  }
}

// ---- timing routes through HTTP

interface Caller {
  who: string;
  headers: Record<string, string>;
}

/** One route to time for one caller. */
interface Probe {
  caller: Caller;
  route: string;
  pathAndQuery: string;
  kind: RouteTiming['kind'];
}

/** One keep-alive connection for every timed call, reading into one buffer (bench/timing-client.ts). */
let timingClient: TimingClient | undefined;

function call(base: string, probe: Probe, keepBody = false): Promise<TimedAnswer> {
  timingClient ??= new TimingClient(base);
  return timingClient.get(probe.pathAndQuery, probe.caller.headers, { keepBody });
}

/** The warm-up pass: every route called `warmupCalls` times (at most a quarter of a route's time), nothing recorded. */
async function warmUp(base: string, probes: readonly Probe[], settings: Settings): Promise<void> {
  for (const probe of probes) {
    const started = performance.now();
    for (let i = 0; i < settings.run.warmupCalls && performance.now() - started < settings.run.routeSeconds * 250; i++) await call(base, probe);
  }
}

/** Times the route's calls; `beforeCall`, when given, runs (untimed) before each one. */
async function timeRoute(base: string, probe: Probe, settings: Settings, beforeCall?: () => Promise<void>): Promise<RouteTiming> {
  const samples: number[] = [];
  const unexpected: Record<string, number> = {};
  let lastBody = '';
  const measuring = performance.now();
  while (samples.length < settings.run.calls && (samples.length < 3 || performance.now() - measuring < settings.run.routeSeconds * 1000)) {
    await beforeCall?.();
    const answer = await call(base, probe);
    if (answer.status !== 200) {
      unexpected[String(answer.status)] = (unexpected[String(answer.status)] ?? 0) + 1;
      lastBody = answer.body;
    }
    samples.push(answer.ms);
  }
  // The answer's items, read once more outside the timed calls (they kept no body).
  if (!lastBody) lastBody = (await call(base, probe, true)).body;
  let items: number | undefined;
  try {
    items = itemsIn(JSON.parse(lastBody));
  } catch {
    items = undefined;
  }
  const { caller, route, kind } = probe;
  const timing: RouteTiming = { who: caller.who, route, kind, calls: samples.length, p50: percentile(samples, 0.5), p99: percentile(samples, 0.99), max: Math.max(...samples), unexpected, ...(items !== undefined ? { items } : {}) };
  const failed = Object.entries(unexpected).map(([status, n]) => `${n}× ${status}`).join(', ');
  out(
    `  ${caller.who.padEnd(15)} ${route.padEnd(58)} p50 ${timing.p50.toFixed(2).padStart(8)} ms  p99 ${timing.p99.toFixed(2).padStart(8)} ms  ${timing.p99 <= LIMITS[kind] && !failed ? 'ok' : 'MISSED'}` +
      `${timing.calls < settings.run.calls ? ` (${timing.calls} calls)` : ''}${items !== undefined ? ` ${fmt(items)} items` : ''}${failed ? ` [${failed}: ${lastBody.slice(0, 200)}]` : ''}`,
  );
  return timing;
}

/**
 * The churn of an organization with live deployments, as its workers make it in other processes
 * (straight to the database): each tick commits one status change, its running deployments in turn
 * `starting`, the one before back to `running`. `restore` leaves them as they were.
 */
class StatusChurn {
  readonly #db: pg.Client;
  readonly #ids: readonly string[];
  #next = 0;
  #changed: string | undefined;
  ticks = 0;

  constructor(db: pg.Client, ids: readonly string[]) {
    this.#db = db;
    this.#ids = ids;
  }

  async tick(): Promise<void> {
    const id = this.#ids[this.#next++ % this.#ids.length] as string;
    await this.#db.query(
      `update deployments set status = case when id = $2 and status = 'running' then 'starting' else 'running' end, status_changed_at = now()
       where id = any($1::uuid[])`,
      [[...new Set([id, this.#changed ?? id])], id],
    );
    this.#changed = id;
    this.ticks++;
  }

  /** How many deployments it turns over. */
  get size(): number {
    return this.#ids.length;
  }

  async restore(): Promise<void> {
    if (this.#changed) await this.#db.query(`update deployments set status = 'running' where id = $1 and status = 'starting'`, [this.#changed]);
  }
}

/** The organization's running deployments, newest first (what its churn turns over). */
async function runningDeploymentsOf(admin: pg.Client, organizationId: number): Promise<string[]> {
  const { rows } = await admin.query<{ id: string }>(`select id from deployments where organization_id = $1 and status = 'running' order by created_at desc, id desc`, [organizationId]);
  return rows.map((row) => row.id);
}

async function signIn(base: string, email: string, password: string): Promise<ApiClient> {
  const api = new ApiClient(base);
  await api.post('/v1/user/signin', { email, password });
  return api;
}

/**
 * The churn phase: every route of the heavy and the typical user timed again (as `<who> (churn)`,
 * held to the same budgets), each call after a committed status change of one of the caller
 * organization's deployments. A change before every read is the worst case of "deployments changing
 * status every second while the lists are read": whatever the reading rate, no read finds its
 * organization unchanged since the one before.
 */
async function churnPhase(base: string, admin: pg.Client, probes: readonly Probe[], seeded: Omit<Seeded, 'timings'>, settings: Settings): Promise<RouteTiming[]> {
  const churns = new Map<string, StatusChurn>();
  for (const who of ['heavy', 'typical'] as const) {
    const ids = await runningDeploymentsOf(admin, seeded[who].organizationId);
    if (ids.length) churns.set(who, new StatusChurn(admin, ids));
    else out(`  the ${who} organization has no running deployment to change: its routes are not timed under churn`);
  }
  const churned = probes.filter((probe) => churns.has(probe.caller.who));
  step(`churn: ${churned.length} routes again, each call after a status change of one of the caller organization's running deployments (${[...churns].map(([who, churn]) => `${who} ${fmt(churn.size)}`).join(', ')})`);
  const timings: RouteTiming[] = [];
  try {
    for (const probe of churned) {
      const churn = churns.get(probe.caller.who) as StatusChurn;
      timings.push(await timeRoute(base, { ...probe, caller: { ...probe.caller, who: `${probe.caller.who} (churn)` } }, settings, () => churn.tick()));
    }
  } finally {
    for (const churn of churns.values()) await churn.restore();
  }
  out(`  ${[...churns].map(([who, churn]) => `${who}: ${fmt(churn.ticks)} status changes`).join(', ')}`);
  return timings;
}

// ---- plans of the hot queries, as the repositories build them

interface PlanFigure {
  query: string;
  shape: string;
  warnings: string[];
  ms: number;
  /** Planning time of the statement as sent (a prepared statement's generic plan is planned once per connection). */
  planningMs?: number;
  error?: string;
}

async function plans(url: string, seeded: Omit<Seeded, 'timings'>, deepOffset: number, endpointId: string | undefined): Promise<PlanFigure[]> {
  const db = createDatabase({ url, poolMax: 2 });
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const figures: PlanFigure[] = [];
  const heavy = { userId: seeded.heavy.userId, organizationId: seeded.heavy.organizationId };
  // Imported here: a repository changed by later work fails its own line, not the run.
  const failed = (name: string, error: unknown) =>
    figures.push({ query: name, shape: '', warnings: [], ms: NaN, error: error instanceof Error ? error.message : String(error) });
  const explain = async (name: string, run: (db: Knex) => Promise<unknown>, pick?: (sql: string) => boolean) => {
    const statements: Knex.Sql[] = [];
    const record = (query: Knex.Sql) => statements.push(query);
    db.on('query', record);
    try {
      await run(db);
    } catch (error) {
      failed(name, error);
      return;
    } finally {
      db.off('query', record);
    }
    await planAll(name, statements.filter((statement) => /^\s*(select|with)\b/i.test(statement.sql) && !/clock_timestamp\(\)/.test(statement.sql) && (!pick || pick(statement.sql))));
  };
  // A statement a repository sends as a prepared statement (no knex event), as it builds it.
  const explainStatement = async (name: string, build: (db: Knex) => Promise<{ statement: Pick<Knex.Sql, 'sql' | 'bindings'> }>) => {
    try {
      await planAll(name, [(await build(db)).statement]);
    } catch (error) {
      failed(name, error);
    }
  };
  const planAll = async (name: string, reads: ReadonlyArray<Pick<Knex.Sql, 'sql' | 'bindings'>>) => {
    for (const [index, statement] of reads.entries()) {
      try {
        const { rows } = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode; 'Execution Time': number; 'Planning Time': number }] }>(
          `explain (analyze, format json) ${withPgPlaceholders(statement.sql)}`,
          statement.bindings as unknown[],
        );
        const [plan] = rows[0]?.['QUERY PLAN'] ?? [];
        if (!plan) throw new Error('no plan');
        figures.push({ query: reads.length > 1 ? `${name} (${index + 1}/${reads.length})` : name, shape: planShape(plan.Plan), warnings: planWarnings(plan.Plan), ms: plan['Execution Time'], planningMs: plan['Planning Time'] });
      } catch (error) {
        failed(name, error);
      }
    }
  };
  try {
    const deployments = await import('../src/deployments/deployments.repository.ts');
    await explain('deployment list, heavy user, first page', (d) => deployments.listDeploymentsOf(d, heavy, { limit: 100, offset: 0 }));
    await explain(`deployment list, heavy user, offset ${fmt(deepOffset)}`, (d) => deployments.listDeploymentsOf(d, heavy, { limit: 100, offset: deepOffset }));
    await explain('deployment by id', (d) => deployments.findDeploymentOf(d, heavy, seeded.heavyDeploymentId));
    const metering = await import('../src/metering/metering.repository.ts');
    const summary = await import('../src/metering/usage-summary.ts');
    const totalsOf = async (d: Knex, organizationId: number) => {
      const account = await metering.findAccountPeriod(d, organizationId);
      if (!account) throw new Error(`organization ${organizationId} has no billing account`);
      const now = new Date();
      return { statement: metering.usageTotalsQuery(d, organizationId, summary.currentPeriod(account, now), now).toSQL().toNative() };
    };
    await explainStatement('usage summary, heavy organization', (d) => totalsOf(d, heavy.organizationId));
    await explainStatement('usage summary, typical organization', (d) => totalsOf(d, seeded.typical.organizationId));
    const keys = await import('../src/api-keys/api-keys.repository.ts');
    await explain('deployment options (API key scopes), heavy organization', (d) => keys.scopableDeployments(d, heavy.organizationId));
    await explain('API keys, heavy organization', (d) => keys.listKeysOf(d, heavy.organizationId));
    const inference = await import('../src/inference/inference.repository.ts');
    await explain('inference routing candidates of an organization (an API key without a deployment scope), heavy organization', (d) => inference.findRoutingCandidates(d, { organizationId: heavy.organizationId }));
    const invitations = await import('../src/invitations/invitations.repository.ts');
    await explain('invitations, heavy organization', (d) => invitations.listInvitationsOf(d, heavy.organizationId));
    const organizations = await import('../src/organizations/organizations.repository.ts');
    await explain('members, heavy organization', (d) => organizations.listMembers(d, heavy.organizationId));
    if (endpointId) {
      const webhooks = await import('../src/webhooks/webhooks.repository.ts');
      await explain('webhook delivery attempts, first page', (d) => webhooks.listAttemptsOf(d, endpointId, { limit: 20, offset: 0 }));
    }
  } finally {
    await client.end();
    await db.destroy();
  }
  return figures;
}

// ---- the run

async function main(): Promise<number> {
  let settings: Settings;
  try {
    settings = readSettings({ ...process.env, ...flagsToEnv(process.argv.slice(2)) });
  } catch (error) {
    if (!(error instanceof SettingsError)) throw error;
    out(`${error.message}\n\nSettings (environment or --flag):`);
    for (const [name, description] of SETTINGS_HELP) out(`  ${name.padEnd(32)} --${name.slice(9).toLowerCase().replace(/_/g, '-').padEnd(24)} ${description}`);
    return error.message.startsWith('Usage:') ? 0 : 2;
  }
  const { shape } = settings;
  return benchRun(
    {
      title:
        `Data-scale benchmark: ${fmt(shape.deployments)} deployments over ${fmt(shape.users)} users (the heavy one ${fmt(shape.heavyDeployments)}), ` +
        `${fmt(shape.usageRows)} usage rows over ${shape.usageDays} days (${Math.round(shape.heavyUsageShare * 100)} % the heavy organization's), ${fmt(shape.gpuIntervals)} GPU intervals` +
        (shape.scale !== 1 ? ` (BENCH_DB_SCALE=${shape.scale})` : ''),
      make: 'make bench-db',
      workDirPrefix: 'mds-bench-db-',
      keepLogs: Boolean(process.env.BENCH_KEEP_LOGS),
    },
    (run) => measure(run, settings),
  );
}

async function measure(run: BenchRun, settings: Settings): Promise<void> {
  const { shape } = settings;
  // 1. Database, migrations, seed.
  const database = await run.openDatabase({ prefix: 'mds_benchdb', machinePostgres: true, reuse: settings.run.reuse, keep: settings.run.keep });
  step(database.description);
  if (settings.run.keep || settings.run.reuse !== undefined) run.atEnd(() => out(`database kept: ${database.name} (measure it again with BENCH_DB_REUSE=${database.name}; drop it when done)`));
  const admin = new pg.Client({ connectionString: database.url });
  admin.on('error', () => undefined); // dropped with the database at the end
  run.atEnd(() => admin.end());
  await admin.connect();
  const invitationToken = randomBytes(24).toString('base64url');
  let seeded: Omit<Seeded, 'timings'>;
  let seedTimings: Record<string, number> = {};
  let seedSeconds = 0;
  let emptyInserts: InsertRate[] = [];
  const migrateDb = createDatabase({ url: database.url, poolMax: 1 });
  const t0 = performance.now();
  const applied = await migrateToLatest(migrateDb).finally(() => migrateDb.destroy());
  step(`migrations: ${applied.length ? `${applied.length} applied` : 'none pending'} (${elapsed((performance.now() - t0) / 1000)})`);
  if (settings.run.reuse) {
    seeded = await seededIn(admin, shape, invitationToken);
    step(`reusing the seeded rows of ${database.name}`);
  } else {
    step('seeding');
    const seedStarted = performance.now();
    const full = await seed(admin, shape, {
      batchRows: settings.run.seedBatchRows,
      invitationToken,
      progress: out,
      beforeUsage: async (organizationId) => {
        step(`inserting usage rows before the usage was seeded, ${settings.run.insertRounds} rounds of ${settings.run.insertSeconds} s per batch size`);
        emptyInserts = await insertRates(database.url, organizationId, 'empty', settings);
        emptyInserts.forEach((rate) => out(insertLine(rate)));
      },
    });
    // Where the service folds what its usage triggers appended on a schedule (every minute, in the
    // workers, which this run does not start), the fold that would have run during the seeding.
    const folded = await foldUsageRollups(database.url);
    if (folded) {
      full.timings.fold_usage_rollups = folded.seconds;
      out(`  the usage rollups folded as the service's scheduled job does: ${fmt(folded.count)} (${elapsed(folded.seconds)})`);
    }
    const vacuumStarted = performance.now();
    await admin.query('vacuum (analyze)');
    full.timings.vacuum_analyze = (performance.now() - vacuumStarted) / 1000;
    seedSeconds = (performance.now() - seedStarted) / 1000;
    out(`  VACUUM ANALYZE (${elapsed(full.timings.vacuum_analyze)})`);
    step(`seeded in ${elapsed(seedSeconds)}`);
    seedTimings = full.timings;
    seeded = full;
  }
  await admin.query('reset all');
  const passwords = { heavy: randomBytes(18).toString('base64url'), typical: randomBytes(18).toString('base64url') };
  await admin.query('update users set password_hash = $2 where id = $1', [seeded.heavy.userId, await hashPassword(passwords.heavy)]);
  await admin.query('update users set password_hash = $2 where id = $1', [seeded.typical.userId, await hashPassword(passwords.typical)]);

  const { rows: sizeRows } = await admin.query<{ relation: string; bytes: string; rows: string }>(
    `select c.relname as relation, pg_total_relation_size(c.oid)::text as bytes, c.reltuples::bigint::text as rows
     from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where n.nspname = 'public' and c.relkind in ('r', 'p') and c.relispartition = false
     order by pg_total_relation_size(c.oid) desc limit 8`,
  );
  const { rows: [dbSize] } = await admin.query<{ bytes: string }>('select pg_database_size(current_database())::text as bytes');
  const { rows: [server] } = await admin.query<Record<string, string>>(
    `select current_setting('server_version') as version, current_setting('shared_buffers') as shared_buffers, current_setting('work_mem') as work_mem,
            current_setting('effective_cache_size') as effective_cache_size, current_setting('max_parallel_workers_per_gather') as parallel_workers,
            current_setting('random_page_cost') as random_page_cost`,
  );
  const gb = (bytes: string | number) => `${(Number(bytes) / 1024 ** 3).toFixed(2)} GB`;
  const sizes = sizeRows.map((row) => ({ relation: row.relation, bytes: Number(row.bytes), rows: Number(row.rows) }));
  step(`database ${gb(dbSize?.bytes ?? 0)}: ${sizes.map((size) => `${size.relation} ${gb(size.bytes)}`).join(', ')}`);
  step(`Postgres ${server?.version}: shared_buffers ${server?.shared_buffers}, work_mem ${server?.work_mem}, effective_cache_size ${server?.effective_cache_size}, ${server?.parallel_workers} parallel workers per gather`);

  // 2. The service.
  const { env: serviceEnv, base } = await productionServiceEnv({ databaseUrl: database.url, role: 'api' });
  // The endpoint the heavy organization registers points at loopback; nothing is delivered (no worker runs).
  serviceEnv.WEBHOOK_ALLOW_PRIVATE_TARGETS = 'true';
  // BENCH_CPU_PROF_DIR: the service writes a CPU profile there on exit (bench/cpu-profile-summary.ts).
  const profile = process.env.BENCH_CPU_PROF_DIR ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF_DIR}`] : [];
  const service = await startService(run.logs, { env: serviceEnv, base, nodeFlags: profile });
  step(`service (pid ${service.pid}, ROLE=api) at ${base}`);

  const heavyApi = await signIn(base, seeded.heavy.email, passwords.heavy);
  const typicalApi = await signIn(base, seeded.typical.email, passwords.typical);
  const heavyKey = await heavyApi.post<{ key: string }>('/v1/organization/api-keys', { name: 'bench-db', deployment_ids: [seeded.heavyRunningDeploymentId], allow_hosted_models: true });
  const typicalKey = await typicalApi.post<{ key: string }>('/v1/organization/api-keys', { name: 'bench-db', deployment_ids: [], allow_hosted_models: true });
  let endpointId: string | undefined;
  try {
    // A reused database has the endpoint of the run that seeded it, with its history.
    const { rows: [existing] } = await admin.query<{ id: string }>(
      `select id from webhook_endpoints where organization_id = $1 and description = 'bench-db' order by created_at limit 1`,
      [seeded.heavy.organizationId],
    );
    endpointId = existing?.id;
    if (!endpointId) {
      const created = await heavyApi.post<{ endpoint: { id: string } }>('/v1/organization/webhook-endpoints', { url: 'http://127.0.0.1:9/bench-db', description: 'bench-db' });
      endpointId = created.endpoint.id;
      // Its delivery history over the 30 days the pruning keeps: one delivery a test event, one attempt each, newest last.
      await admin.query(
        `with d as (
           insert into webhook_deliveries (endpoint_id, event_type, status, attempts, queued_at, created_at, completed_at)
           select $1::uuid, 'webhook.test', case when k % 50 = 0 then 'failed' else 'succeeded' end, 1, now() - make_interval(secs => ($2::int - k) * 2592000.0 / $2::int),
                  now() - make_interval(secs => ($2::int - k) * 2592000.0 / $2::int), now() - make_interval(secs => ($2::int - k) * 2592000.0 / $2::int)
           from generate_series(1, $2::int) k returning id, status, created_at
         )
         insert into webhook_delivery_attempts (delivery_id, endpoint_id, attempt, outcome, response_status, duration_ms, created_at)
         select id, $1::uuid, 1, status, case when status = 'failed' then 500 else 204 end, 40, created_at from d order by created_at`,
        [endpointId, shape.heavyWebhookAttempts],
      );
      await admin.query('analyze webhook_deliveries, webhook_delivery_attempts');
    }
    step(`signed in as the heavy user (${seeded.heavy.email}) and a typical one (${seeded.typical.email}); API keys and a webhook endpoint with ${fmt(shape.heavyWebhookAttempts)} delivery attempts`);
  } catch (error) {
    out(`  the webhook endpoint could not be created, its routes are not timed: ${error instanceof Error ? error.message : String(error)}`);
  }

  // 3. Every read route.
  const document = JSON.parse(readFileSync(path.join(ROOT, 'generated', 'openapi.json'), 'utf8')) as unknown;
  const cursor = deploymentListHasCursor(document);
  const { rows: [model] } = await admin.query<{ id: string }>("select id from deployable_models where enabled and model_type = 'LLM' order by sort_order limit 1");
  const probes: Probe[] = [];
  for (const [who, api, key, deploymentId] of [
    ['typical', typicalApi, typicalKey.key, seeded.typicalDeploymentId],
    ['heavy', heavyApi, heavyKey.key, seeded.heavyDeploymentId],
  ] as const) {
    const caller: Caller = { who, headers: api.headers() };
    const add = (route: string, pathAndQuery: string, kind: RouteTiming['kind'] = 'first') => probes.push({ caller, route, pathAndQuery, kind });
    add('GET /v1/auth/session', '/v1/auth/session');
    add('GET /v1/user/sessions', '/v1/user/sessions');
    add('GET /v1/organization', '/v1/organization');
    add('GET /v1/organization/members', '/v1/organization/members');
    add('GET /v1/organization/invitations', '/v1/organization/invitations');
    add('GET /v1/invitations', '/v1/invitations');
    add('GET /v1/organization/api-keys', '/v1/organization/api-keys');
    add('GET /v1/organization/api-keys/deployment-options', '/v1/organization/api-keys/deployment-options');
    add('GET /v1/organization/api-key-limits', '/v1/organization/api-key-limits');
    add('GET /v1/organization/webhook-endpoints', '/v1/organization/webhook-endpoints');
    if (who === 'heavy' && endpointId) {
      add('GET /v1/organization/webhook-endpoints/{id}', `/v1/organization/webhook-endpoints/${endpointId}`);
      add('GET /v1/organization/webhook-endpoints/{id}/attempts', `/v1/organization/webhook-endpoints/${endpointId}/attempts`);
    }
    add('GET /api/v1/model-deployments', '/api/v1/model-deployments');
    if (who === 'heavy') add(`GET /api/v1/model-deployments?offset=${shape.deepOffset}`, `/api/v1/model-deployments?offset=${shape.deepOffset}`, 'deep');
    if (cursor) {
      const first = (await api.get<{ next_cursor?: string | null }>('/api/v1/model-deployments')).next_cursor;
      if (first) add('GET /api/v1/model-deployments?after={page 2}', `/api/v1/model-deployments?after=${encodeURIComponent(first)}`);
      if (who === 'heavy') {
        // The cursor where the deep page ends: the page after it is as deep as the offset's.
        const deep = (await api.get<{ next_cursor?: string | null }>(`/api/v1/model-deployments?offset=${shape.deepOffset}`)).next_cursor;
        if (deep) add(`GET /api/v1/model-deployments?after={past ${shape.deepOffset}}`, `/api/v1/model-deployments?after=${encodeURIComponent(deep)}`, 'deep');
        else out('  the deep page carried no next_cursor: the deep cursor page is not timed');
      }
    }
    add('GET /api/v1/model-deployments/{id}', `/api/v1/model-deployments/${deploymentId}`);
    add('GET /api/v1/deployable-models', '/api/v1/deployable-models');
    if (model) add('GET /api/v1/deployable-models/{id}', `/api/v1/deployable-models/${model.id}`);
    add('GET /v1/billing/config', '/v1/billing/config');
    add('GET /v1/billing/account', '/v1/billing/account');
    add('GET /v1/billing/subscription', '/v1/billing/subscription');
    add('GET /v1/billing/spending-limit', '/v1/billing/spending-limit');
    add('GET /v1/billing/payment-methods', '/v1/billing/payment-methods');
    add('GET /v1/billing/invoices', '/v1/billing/invoices');
    add('GET /v1/billing/usage-summary', '/v1/billing/usage-summary', who === 'heavy' ? 'usage-summary-heavy' : 'first');
    probes.push({ caller: { who, headers: { accept: 'application/json', authorization: `Bearer ${key}` } }, route: 'GET /v1/models (API key)', pathAndQuery: '/v1/models', kind: 'first' });
  }
  const anonymous: Caller = { who: 'anonymous', headers: { accept: 'application/json' } };
  for (const [route, pathAndQuery] of [
    ['GET /v1/invitations/by-token/{token}', `/v1/invitations/by-token/${seeded.invitationToken}`],
    ['GET /v1/sso/providers', '/v1/sso/providers'],
    ['GET /healthz', '/healthz'],
    ['GET /readyz', '/readyz'],
  ] as const) {
    probes.push({ caller: anonymous, route, pathAndQuery, kind: 'first' });
  }
  const only = settings.run.routes;
  if (only) {
    const chosen = probes.filter((probe) => only.some((part) => `${probe.caller.who}: ${probe.route}`.includes(part)));
    probes.splice(0, probes.length, ...chosen);
  }
  step(`warm-up: every route ${settings.run.warmupCalls} times`);
  const warmStarted = performance.now();
  await warmUp(base, probes, settings);
  step(
    `timing ${probes.length} routes (warm-up ${elapsed((performance.now() - warmStarted) / 1000)}): ${settings.run.calls} calls each (at most ${settings.run.routeSeconds} s a route), one at a time; ` +
      `the deployment cursor ${cursor ? 'is in the interface: timed' : 'is not in the interface yet'}`,
  );
  const timings: RouteTiming[] = [];
  for (const probe of probes) timings.push(await timeRoute(base, probe, settings));
  if (settings.run.churn) timings.push(...(await churnPhase(base, admin, probes, seeded, settings)));
  timingClient?.close();
  await service.stop();
  if (only) {
    out();
    out(textTable(routeTable(timings, settings.run.calls)));
    out('(BENCH_DB_ROUTES: these routes only; no plans, inserts or results written)');
    return;
  }

  // 4. Plans.
  step('plans of the hot queries (EXPLAIN ANALYZE, as the repositories build them)');
  const planFigures = await plans(database.url, seeded, shape.deepOffset, endpointId);
  for (const plan of planFigures) {
    out(`  ${plan.query}: ${plan.error ? `not planned: ${plan.error}` : `${plan.ms.toFixed(1)} ms (planning ${plan.planningMs?.toFixed(1)} ms)`}`);
    if (!plan.error) out(`    ${plan.shape}${plan.warnings.length ? `  ⚠ ${plan.warnings.join(', ')}` : ''}`);
  }

  // 5. Inserting usage at scale.
  step(`inserting usage rows into the seeded table, ${settings.run.insertRounds} rounds of ${settings.run.insertSeconds} s per batch size (insertUsageRecords, synchronous_commit off)`);
  const seededInserts = await insertRates(database.url, seeded.insertOrganizationId, 'seeded', settings);
  seededInserts.forEach((rate) => out(insertLine(rate)));

  // 6. Report.
  const reference = referenceRun(settings);
  const inserts = [...emptyInserts, ...seededInserts];
  const list = dbBudgets(timings, inserts, reference?.inserts);
  const table = routeTable(timings, settings.run.calls);
  const machine = machineName();
  const missed = list.filter((budget) => budget.met === false);
  const notes = [
    `Shape: ${fmt(shape.deployments)} deployments over ${fmt(shape.users)} users, the heavy user ${fmt(shape.heavyDeployments)} (${fmt(Math.round(shape.heavyDeployments * shape.heavyActiveShare))} not terminated), ${fmt(shape.usageRows)} usage rows over ${shape.usageDays} days (${Math.round(shape.heavyUsageShare * 100)} % the heavy organization's, ${Math.round((1 - shape.deploymentUsageShare) * 100)} % hosted-model tokens), ${fmt(shape.gpuIntervals)} one-minute GPU intervals; the heavy organization has ${fmt(shape.heavyMembers + 1)} members, ${fmt(shape.heavyApiKeys)} API keys, ${fmt(shape.heavyInvitations)} invitations, ${fmt(shape.heavyWebhookAttempts)} webhook delivery attempts; its billing period spans all its usage.`,
    `Database: ${database.description.replace(/ \(.*\)$/, '')}, Postgres ${server?.version} (shared_buffers ${server?.shared_buffers}, work_mem ${server?.work_mem}), ${gb(dbSize?.bytes ?? 0)} after seeding${seedSeconds ? ` in ${elapsed(seedSeconds)}` : ' (reused)'}; ${sizes.slice(0, 4).map((size) => `${size.relation} ${gb(size.bytes)}`).join(', ')}.`,
    `Calls: one at a time over one keep-alive connection (bench/timing-client.ts: read into one reused buffer, bodies counted, not kept), ${settings.run.calls} per route and user after a pass of ${settings.run.warmupCalls} over every route (fewer when ${settings.run.routeSeconds} s ran out first: the count is shown), the service \`node dist/main.js\` ROLE=api, NODE_ENV=production, on the same 2 cores as Postgres and the client. Budgets: p99 <= ${LIMITS.first} ms for every read route at its first page, <= ${LIMITS.deep} ms at offset ${fmt(shape.deepOffset)} for the heavy user, <= ${LIMITS['usage-summary-heavy']} ms for the heavy organization's usage summary.`,
    settings.run.churn
      ? 'Churn: the columns `(churn)` time every route of the heavy and the typical user again, each call after a committed status change of one of the caller organization\'s running deployments (one `starting`, the one before back to `running`, straight to the database as a worker in another process writes): a change before every read, the worst case of deployments changing status every second while the lists are read.'
      : 'Churn: not timed (BENCH_DB_CHURN=0).',
    `Inserts: insertUsageRecords on a pool of its own with synchronous_commit off, as the service writes usage, one batch after the other, hosted-model token rows of an organization of their own; \`empty\` before the usage rows were seeded, \`seeded\` after; each batch size the best of ${settings.run.insertRounds} rounds of ${settings.run.insertSeconds} s, each from a CHECKPOINT${inserts.every((rate) => rate.checkpointed) ? '' : ' (where the role may: not on this server)'} (the first change of a page after it writes the whole page to the WAL: with random keys, usage_id and request_id, that is an index page or two per row on a large table). Reference: ${reference ? `${reference.file} (commit ${reference.commit}), met at >= ${Math.round(0.9 * 100)} % of its rate (noise of a shared machine)` : 'none at this shape in bench/results yet (this run becomes it once committed)'}.`,
    `Machine: ${machine}; load average at the start ${run.loadAtStart.map((v) => v.toFixed(2)).join(' ')} (the 2 cores are shared with other work: p99 figures carry its noise).`,
    'Not timed: GET /api/v1/model-deployments/{id}/events (an event stream, no end), the SSO redirects, /docs, /redoc and /openapi.json (static).',
  ];
  printReport(
    table,
    [
      { title: 'Inserting usage rows (rows/s):', lines: inserts.map((rate) => `  ${rate.table.padEnd(6)} ${insertLine(rate).trim()}`) },
      {
        title: `Budgets: ${list.filter((budget) => budget.met).length} met, ${missed.length} missed${list.some((budget) => budget.met === undefined) ? `, ${list.filter((budget) => budget.met === undefined).length} without a reference` : ''}`,
        lines: [textBudgets(list.filter((budget) => budget.met !== true))],
      },
    ],
    notes,
  );

  const head = resultHead(run, database.description);
  const json = {
    ...head,
    postgres: server,
    shape,
    run: settings.run,
    seeding: { seconds: seedSeconds, steps: seedTimings, database_bytes: Number(dbSize?.bytes ?? 0), largest_tables: sizes },
    deployment_cursor: cursor,
    routes: timings,
    plans: planFigures,
    inserts,
    insert_reference: reference ? { file: reference.file, commit: reference.commit } : null,
    budgets: list,
  };
  const planLines = ['', '## Plans of the hot queries (EXPLAIN ANALYZE)', '', '| Query | ms | Plan |', '|---|---:|---|', ...planFigures.map((plan) => `| ${plan.query} | ${plan.error ? '–' : plan.ms.toFixed(1)} | ${plan.error ? `not planned: ${plan.error}` : `\`${plan.shape}\`${plan.warnings.length ? ` (${plan.warnings.join(', ')})` : ''}`} |`)];
  const insertLines = ['', '## Inserting usage rows', '', '| Table | Batch | rows/s (best round) | rounds | batch p50 / p99 ms |', '|---|---:|---:|---:|---:|', ...inserts.map((rate) => `| ${rate.table} | ${rate.batch} | ${fmt(rate.rowsPerSecond)} | ${rate.rounds?.map(fmt).join(', ') ?? ''} | ${rate.p50.toFixed(2)} / ${rate.p99.toFixed(2)} |`)];
  writeResults(
    'db-',
    json,
    markdown(head, table, list, notes, {
      title: 'Data-scale benchmark: latest run',
      writtenBy: '`make bench-db` (bench/db-scale.ts)',
      budgetsHeading: 'Budget',
    }) + [...insertLines, ...planLines, ''].join('\n'),
  );
}

process.exitCode = await main();
