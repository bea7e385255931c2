import { describe, expect, it } from 'vitest';
import {
  SettingsError,
  dbBudgets,
  deploymentListHasCursor,
  derived,
  flagsToEnv,
  itemsIn,
  percentile,
  planShape,
  planWarnings,
  readSettings,
  routeTable,
  withPgPlaceholders,
  type InsertRate,
  type RouteTiming,
} from '../../bench/db-shape.ts';

/** The pure helpers of the data-scale benchmark (bench/db-scale.ts, `make bench-db`). */
describe('data-scale benchmark settings', () => {
  it('has the data-scale shape by default', () => {
    const { shape, run } = readSettings({});
    expect(shape).toMatchObject({ users: 10_000, deployments: 1_000_000, heavyDeployments: 200_000, usageRows: 20_000_000, heavyUsageShare: 0.5, usageDays: 30, deepOffset: 100_000 });
    expect(run).toMatchObject({ calls: 200, insertBatches: [1, 50, 500], insertRounds: 3, churn: true, keep: false, reuse: undefined });
    expect(readSettings({ BENCH_DB_CHURN: '0' }).run.churn).toBe(false);
  });

  it('scales every count, keeping the minimums a run needs', () => {
    const { shape } = readSettings({ BENCH_DB_SCALE: '0.001' });
    expect(shape).toMatchObject({ users: 10, deployments: 1_000, heavyDeployments: 200, usageRows: 20_000, gpuIntervals: 1_000, deepOffset: 100, heavyApiKeys: 2 });
    expect(readSettings({ BENCH_DB_SCALE: '0.00001' }).shape.users).toBe(3);
  });

  it('takes each count on its own, from the environment or a flag, flags first', () => {
    const env = { BENCH_DB_USAGE_ROWS: '5000', ...flagsToEnv(['--scale', '0.01', '--usage-rows=7_000', '--calls', '20']) };
    const { shape, run } = readSettings(env);
    expect(shape.usageRows).toBe(7_000);
    expect(shape.deployments).toBe(10_000);
    expect(run.calls).toBe(20);
  });

  it('refuses what it cannot run', () => {
    expect(() => flagsToEnv(['--sclae', '1'])).toThrow(SettingsError);
    expect(() => flagsToEnv(['--scale'])).toThrow(/needs a value/);
    expect(() => readSettings({ BENCH_DB_SCALE: '0' })).toThrow(/BENCH_DB_SCALE/);
    expect(() => readSettings({ BENCH_DB_HEAVY_DEPLOYMENTS: '2000000' })).toThrow(/fewer than all deployments/);
    expect(() => readSettings({ BENCH_DB_INSERT_BATCHES: '1,x' })).toThrow(/BENCH_DB_INSERT_BATCHES/);
  });

  it('derives the heavy user’s running deployments and how long each ran from the GPU intervals', () => {
    const d = derived(readSettings({}).shape);
    expect(d.heavyActive).toBe(1_000);
    expect(d.heavyRunning + d.heavyFailed).toBe(1_000);
    expect(d.heavyMinutesRunning * d.heavyRunning).toBeCloseTo(500_000, -3);
  });
});

describe('figures', () => {
  it('takes nearest-rank percentiles', () => {
    const values = Array.from({ length: 200 }, (_, i) => 200 - i);
    expect(percentile(values, 0.5)).toBe(100);
    expect(percentile(values, 0.99)).toBe(198);
    expect(percentile([7], 0.99)).toBe(7);
    expect(percentile([], 0.5)).toBeNaN();
  });

  it('counts the items of a list answer, whatever its envelope', () => {
    expect(itemsIn({ items: [1, 2], total: 2 })).toBe(2);
    expect(itemsIn({ object: 'list', data: [1] })).toBe(1);
    expect(itemsIn([1, 2, 3])).toBe(3);
    expect(itemsIn({ id: 1 })).toBeUndefined();
  });

  it('holds each route to its budget and the inserts to the reference run', () => {
    const timing = (kind: RouteTiming['kind'], p99: number, unexpected: Record<string, number> = {}): RouteTiming => ({ who: 'heavy', route: `GET /${kind}`, kind, calls: 200, p50: 1, p99, max: p99, unexpected });
    const rate = (rowsPerSecond: number): InsertRate => ({ batch: 50, table: 'seeded', rows: 1, seconds: 1, rowsPerSecond, p50: 1, p99: 1 });
    const list = dbBudgets([timing('first', 9.9), timing('deep', 26), timing('usage-summary-heavy', 19), timing('first', 2, { 500: 1 })], [rate(950)], [rate(1000)]);
    expect(list.map((budget) => budget.met)).toEqual([true, false, true, false, true]);
    expect(dbBudgets([], [rate(850)], [rate(1000)])[0]?.met).toBe(false);
    expect(dbBudgets([], [rate(850)], undefined)[0]).toMatchObject({ met: undefined, limit: '>= reference (none yet)' });
  });

  it('lays the routes out one row each, a column per caller, marking the missed ones', () => {
    const t = (who: string, route: string, p99: number): RouteTiming => ({ who, route, kind: 'first', calls: 200, p50: 1, p99, max: p99, unexpected: {} });
    const table = routeTable([t('typical', 'GET /a', 2), t('heavy', 'GET /a', 12), t('heavy', 'GET /b', 3)], 200);
    expect(table).toEqual([
      ['route', 'typical p50 / p99 ms', 'heavy p50 / p99 ms'],
      ['GET /a', '1.00 / 2.00', '1.00 / 12.00 ✗'],
      ['GET /b', '', '1.00 / 3.00'],
    ]);
  });
});

describe('plans', () => {
  const countPlan = {
    'Node Type': 'Aggregate',
    Strategy: 'Plain',
    Plans: [
      {
        'Node Type': 'Gather',
        'Workers Planned': 2,
        Plans: [{ 'Node Type': 'Parallel Seq Scan', 'Relation Name': 'deployments', 'Actual Rows': 66_667, 'Actual Loops': 3 }],
      },
    ],
  };

  it('puts a plan in one line: nodes, indexes, workers, sorts and rows read', () => {
    expect(planShape(countPlan)).toBe('Aggregate > Gather (2 workers) > Parallel Seq Scan deployments (200k rows)');
    expect(
      planShape({
        'Node Type': 'Limit',
        Plans: [
          {
            'Node Type': 'Sort',
            'Sort Method': 'external merge',
            'Sort Space Type': 'Disk',
            'Sort Space Used': 51_200,
            Plans: [{ 'Node Type': 'Bitmap Heap Scan', 'Relation Name': 'deployments', 'Plan Rows': 199_000, Plans: [{ 'Node Type': 'Bitmap Index Scan', 'Index Name': 'deployments_by_owner', 'Plan Rows': 199_000 }] }],
          },
        ],
      }),
    ).toBe('Limit > Sort (external merge, 50 MB on disk) > Bitmap Heap Scan deployments (~199k rows) > Bitmap Index Scan deployments_by_owner (~199k rows)');
    expect(planShape({ 'Node Type': 'Hash Join', Plans: [{ 'Node Type': 'Seq Scan', 'Relation Name': 'prices', 'Actual Rows': 4 }, { 'Node Type': 'Hash', Plans: [{ 'Node Type': 'Index Scan', 'Index Name': 'x', 'Actual Rows': 2 }] }] })).toBe(
      'Hash Join [Seq Scan prices (4 rows); Hash > Index Scan x (2 rows)]',
    );
  });

  it('warns of whole-table scans and sorts on disk', () => {
    expect(planWarnings(countPlan)).toEqual(['sequential scan of deployments']);
    expect(planWarnings({ 'Node Type': 'Sort', 'Sort Space Type': 'Disk' })).toEqual(['sort on disk']);
  });

  it('gives raw statements pg placeholders and leaves builder ones as they are', () => {
    expect(withPgPlaceholders('select * from t where a = ? and b < ?')).toBe('select * from t where a = $1 and b < $2');
    expect(withPgPlaceholders('select * from t where a = $1')).toBe('select * from t where a = $1');
  });
});

describe('the deployment cursor', () => {
  it('is detected in the document when the list takes `after`, through a $ref or inline', () => {
    const document = (parameters: unknown[]) => ({
      paths: { '/api/v1/model-deployments': { get: { parameters } } },
      components: { parameters: { 'Page.after': { name: 'after', in: 'query' }, 'Page.limit': { name: 'limit', in: 'query' } } },
    });
    expect(deploymentListHasCursor(document([{ $ref: '#/components/parameters/Page.limit' }]))).toBe(false);
    expect(deploymentListHasCursor(document([{ $ref: '#/components/parameters/Page.after' }]))).toBe(true);
    expect(deploymentListHasCursor(document([{ name: 'after', in: 'query' }]))).toBe(true);
    expect(deploymentListHasCursor({})).toBe(false);
  });
});
