import type { Knex } from 'knex';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase } from '../../src/db/database.ts';
import { findDeploymentOf, listDeploymentsOf, type Scope } from '../../src/deployments/deployments.repository.ts';
import { createTestDatabase } from '../helpers/database.ts';

/**
 * "Listing and reads stay index-backed at a million deployments" (DESIGN.md §4, docs/scaling.md):
 * a million deployments, planned by Postgres after ANALYZE, and the plans of the queries the API
 * runs read. The SQL is the repository's own: `listDeploymentsOf` and `findDeploymentOf` run on a
 * knex instance whose `query` events (the builders' `toSQL()` with their bindings) are recorded,
 * then each is planned with EXPLAIN (FORMAT JSON). No planner setting is changed (enable_seqscan
 * stays on): the planner picks the index because it is the cheaper plan at this size.
 */
const DEPLOYMENTS = Number(process.env.QUERY_PLAN_DEPLOYMENTS ?? 1_000_000);
const OWNERS = 1_000;
/** The largest tenant: one user with 5 % of every deployment, in one organization. */
const LARGE_SHARE = 0.05;

interface PlanNode {
  'Node Type': string;
  'Plan Rows': number;
  'Relation Name'?: string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

function nodesOf(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodesOf)];
}

const INDEX_NODES = ['Index Scan', 'Index Only Scan', 'Bitmap Index Scan'];

/** Every statement `run` sends, as knex sends it to pg (sql with $1 … placeholders, and its bindings). */
async function statementsOf(db: Knex, run: () => Promise<unknown>): Promise<Knex.Sql[]> {
  const statements: Knex.Sql[] = [];
  const record = (query: Knex.Sql) => statements.push(query);
  db.on('query', record);
  try {
    await run();
  } finally {
    db.off('query', record);
  }
  return statements;
}

async function planOf(statement: Knex.Sql): Promise<PlanNode> {
  const result = await planner.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(`explain (format json) ${statement.sql}`, statement.bindings as unknown[]);
  const [row] = result.rows;
  if (!row) throw new Error('no plan');
  return row['QUERY PLAN'][0].Plan;
}

/** What a plan reads the deployments table with: index names, and whether any node scans it whole or sorts. */
function howDeploymentsAreRead(plan: PlanNode) {
  const nodes = nodesOf(plan);
  // A bitmap heap scan names the table, its bitmap index scan child names the index.
  return {
    indexes: [...new Set(nodes.filter((node) => INDEX_NODES.includes(node['Node Type'])).map((node) => node['Index Name']))],
    sequentialScans: nodes.filter((node) => node['Node Type'] === 'Seq Scan' && node['Relation Name'] === 'deployments').length,
    sorts: nodes.filter((node) => node['Node Type'] === 'Sort' || node['Node Type'] === 'Incremental Sort').length,
  };
}

let database: { url: string; drop(): Promise<void> };
let db: Knex;
/** A plain connection: EXPLAIN takes the statement with pg's own placeholders. */
let planner: pg.Client;
let large: Scope;
let typical: Scope;
let someId: string;

beforeAll(async () => {
  database = await createTestDatabase();
  db = createDatabase({ url: database.url, poolMax: 2 });
  // Owners: user n in organization n. Deployments: the large tenant's share to user 1, the rest
  // spread over the others, every model of the catalog, created over a year, almost all terminated
  // (the history a platform keeps), one in twenty still running.
  await db.raw(`insert into organizations (name, slug) select 'Organization ' || n, 'organization-' || n from generate_series(1, ?) n`, [OWNERS]);
  await db.raw(
    `insert into users (email, name, current_organization_id)
     select 'owner-' || n || '@example.com', 'Owner ' || n, o.id
     from generate_series(1, ?) n join organizations o on o.slug = 'organization-' || n`,
    [OWNERS],
  );
  await db.raw(
    `with owners as (select row_number() over (order by id) as n, id, current_organization_id from users where email like 'owner-%'),
          models as (select row_number() over (order by id) - 1 as n, id, model_name, count(*) over () as total from deployable_models)
     insert into deployments (user_id, organization_id, deployable_model_id, model_name, model_format, model_size_in_billions,
                              quantization, model_engine, status, created_at, status_changed_at, terminated_at)
     select o.id, o.current_organization_id, m.id, m.model_name, 'pytorch', 7, 'none', 'vLLM',
            case when d % 20 = 0 then 'running' else 'terminated' end,
            now() - make_interval(secs => d * 31.5),
            now() - make_interval(secs => d * 31.5),
            case when d % 20 = 0 then null else now() - make_interval(secs => d * 31.5 - 3600) end
     from generate_series(1, ?) d
     join owners o on o.n = case when d <= ? then 1 else 2 + d % (? - 1) end
     join models m on m.n = d % m.total`,
    [DEPLOYMENTS, Math.round(DEPLOYMENTS * LARGE_SHARE), OWNERS],
  );
  await db.raw('analyze users, organizations, deployments');
  planner = new pg.Client({ connectionString: database.url });
  await planner.connect();
  const owner = async (n: number): Promise<Scope> => {
    const row = await db('users').where({ email: `owner-${n}@example.com` }).first<{ id: number; current_organization_id: number }>('id', 'current_organization_id');
    if (!row) throw new Error(`no owner ${n}`);
    return { userId: row.id, organizationId: row.current_organization_id };
  };
  large = await owner(1);
  typical = await owner(500);
  const last = await db('deployments').where({ user_id: typical.userId }).orderBy('created_at', 'asc').first<{ id: string }>('id');
  someId = last?.id ?? '';
}, 600_000);

afterAll(async () => {
  await planner?.end();
  await db?.destroy();
  await database?.drop();
});

describe(`query plans at ${DEPLOYMENTS.toLocaleString('en')} deployments`, () => {
  it('holds the deployments it was asked for', async () => {
    const [{ count }] = (await db('deployments').count({ count: '*' })) as [{ count: string }];
    expect(Number(count)).toBe(DEPLOYMENTS);
  });

  for (const [who, scope, page] of [
    ['a typical user, first page', () => typical, { limit: 20, offset: 0 }],
    ['the largest tenant (5 %), first page', () => large, { limit: 20, offset: 0 }],
    ['the largest tenant, page 50', () => large, { limit: 20, offset: 980 }],
  ] as const) {
    it(`lists the deployments of ${who} from the index on (user, organization, created_at, id), without sorting and without a sequential scan`, async () => {
      const statements = await statementsOf(db, () => listDeploymentsOf(db, scope(), page));
      expect(statements).toHaveLength(2);
      const [pageQuery, countQuery] = statements.sort((a, b) => Number(a.sql.includes('count(')) - Number(b.sql.includes('count(')));
      if (!pageQuery || !countQuery) throw new Error('two statements expected');
      expect(pageQuery.sql).toMatch(/where "user_id" = \$1 and "organization_id" = \$2 order by "created_at" desc, "id" desc limit \$3( offset \$4)?$/);
      expect(howDeploymentsAreRead(await planOf(pageQuery))).toEqual({ indexes: ['deployments_by_owner'], sequentialScans: 0, sorts: 0 });

      expect(countQuery.sql).toMatch(/^select count\(\*\)/);
      const count = howDeploymentsAreRead(await planOf(countQuery));
      expect(count.sequentialScans).toBe(0);
      expect(count.indexes).toEqual(['deployments_by_owner']);
    });
  }

  it("estimates the largest tenant's rows from the extended statistics, not as if user and organization were independent", async () => {
    const [countQuery] = await statementsOf(db, () => db('deployments').where({ user_id: large.userId, organization_id: large.organizationId }).count({ count: '*' }));
    if (!countQuery) throw new Error('no statement');
    const scan = nodesOf(await planOf(countQuery)).find((node) => node['Index Name'] === 'deployments_by_owner');
    const actual = Math.round(DEPLOYMENTS * LARGE_SHARE);
    expect(scan?.['Plan Rows']).toBeGreaterThan(actual / 2);
    expect(scan?.['Plan Rows']).toBeLessThan(actual * 2);
  });

  it('gets one deployment by its primary key', async () => {
    const statements = await statementsOf(db, () => findDeploymentOf(db, typical, someId));
    expect(statements).toHaveLength(1);
    const [statement] = statements;
    if (!statement) throw new Error('one statement expected');
    expect(howDeploymentsAreRead(await planOf(statement))).toEqual({ indexes: ['deployments_pkey'], sequentialScans: 0, sorts: 0 });
    expect(await findDeploymentOf(db, typical, someId)).toMatchObject({ id: someId, user_id: typical.userId });
  });

  it('gets one deployment for update by its primary key', async () => {
    const statements = await statementsOf(db, () => db.transaction((trx) => findDeploymentOf(trx, typical, someId, { forUpdate: true })));
    const locking = statements.find((statement) => statement.sql.endsWith('for update'));
    if (!locking) throw new Error('no select … for update');
    expect(howDeploymentsAreRead(await planOf(locking)).indexes).toEqual(['deployments_pkey']);
  });
});
