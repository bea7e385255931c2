import type { Knex } from 'knex';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase } from '../../src/db/database.ts';
import { findGpuMeteringDue, usageTotalsQuery } from '../../src/metering/metering.repository.ts';
import { createTestDatabase } from '../helpers/database.ts';
import { nodesOf, planOf, statementsOf, type PlanNode } from '../helpers/query-plans.ts';

/**
 * The usage summary's estimate of an organization's open replicas (issue #39): a heavy organization
 * with many replicas, nearly all of them closed, and a few other organizations. The summary is
 * prepared on each connection and its first five executions there are custom plans, planned with
 * the organization's id: the plan of each must expect about as many replicas as are open. Postgres
 * could not estimate the old predicate of the partial index (`accrued_until is distinct from
 * running_until`, two columns compared) and took every replica of the organization for an open one
 * (nearly 200,000 for 900 at scale), then paid for a Gather with two workers; and the summary's
 * `gpu_service_key is not null`, taken as independent of the open replicas while only they have a
 * key, made it expect one row (and join the prices by nested loop).
 */
const HEAVY = { closed: 20_000, open: 100 };
/** Other organizations, each with its closed and open replicas. */
const OTHERS = { organizations: 40, closed: 198, open: 2 };
const NOW = new Date('2026-11-20T12:00:00Z');
const PERIOD = { start: new Date('2026-11-01T00:00:00Z'), end: new Date('2026-12-01T00:00:00Z') };
const SERVICE_KEY = 'aws:us-east-1:gpu_instance:g5.12xlarge:a10g:1';

let database: { url: string; drop(): Promise<void> };
let db: Knex;
/** A plain connection: EXPLAIN takes the statement with pg's own placeholders. */
let planner: pg.Client;
let heavyOrganization: number;

beforeAll(async () => {
  database = await createTestDatabase();
  db = createDatabase({ url: database.url, poolMax: 2 });
  const organizations = OTHERS.organizations + 1;
  await db.raw(`insert into organizations (name, slug) select 'Organization ' || n, 'organization-' || n from generate_series(1, ?) n`, [organizations]);
  await db.raw(
    `insert into users (email, name, current_organization_id)
     select 'owner-' || n || '@example.com', 'Owner ' || n, o.id from generate_series(1, ?) n join organizations o on o.slug = 'organization-' || n`,
    [organizations],
  );
  await db.raw(
    `insert into clusters (name, provider, region, endpoint) values ('plan-cluster', 'aws', 'us-east-1', 'http://plan-cluster.example');
     insert into instances (cluster_id, instance_type_id, engine_worker)
     select c.id, t.id, 'worker-1:30001' from clusters c, instance_types t where c.name = 'plan-cluster' and t.name = 'g5.12xlarge';
     insert into prices (provider, region, resource_kind, instance_type, gpu_type, gpu_count, unit_amount_decimal)
     values ('aws', 'us-east-1', 'gpu_instance', 'g5.12xlarge', 'a10g', '1', 0.0003) on conflict (service_key) do nothing`,
  );
  // Each organization's replicas on deployments of 100 replicas (an elastic deployment's history),
  // made over the 50 days before NOW, interleaved in the table as time made them. A closed one served
  // an hour and its seconds are closed up to the second it stopped; it has no GPU service key, as the
  // history before keys were stored has none (migration 20261126000000 wrote them for the open ones
  // only). An open one serves since two days, priced by its key, closed up to the minute before NOW.
  await db.transaction(async (trx) => {
    await trx.raw(
      `create temp table planned on commit drop as
         select gen_random_uuid() as allocation_id, o.id as organization_id, u.id as user_id, k, k >= o.closed as open,
                :now::timestamptz - make_interval(secs => case when k >= o.closed then 2 * 86400 else 3 * 86400 + random() * 47 * 86400 end) as since
         from (select id, case when slug = 'organization-1' then :heavyClosed::int else :othersClosed::int end as closed,
                      case when slug = 'organization-1' then :heavyOpen::int else :othersOpen::int end as open
               from organizations) o
         join users u on u.current_organization_id = o.id
         cross join lateral generate_series(0, o.closed + o.open - 1) k`,
      { now: NOW, heavyClosed: HEAVY.closed, heavyOpen: HEAVY.open, othersClosed: OTHERS.closed, othersOpen: OTHERS.open },
    );
    await trx.raw(
      `create temp table planned_deployments on commit drop as
         select gen_random_uuid() as id, organization_id, user_id, k / 100 as n from planned group by organization_id, user_id, k / 100`,
    );
    await trx.raw(
      `insert into deployments (id, user_id, organization_id, deployable_model_id, model_name, model_format, model_size_in_billions, quantization, model_engine, status, created_at)
       select d.id, d.user_id, d.organization_id, m.id, m.model_name, 'pytorch', 7, 'none', 'vLLM', 'running', :now::timestamptz - interval '60 days'
       from planned_deployments d cross join (select id, model_name from deployable_models order by id limit 1) m`,
      { now: NOW },
    );
    await trx.raw(
      `insert into gpu_allocations (id, deployment_id, instance_id, gpu_count, status, created_at, released_at)
       select p.allocation_id, d.id, (select id from instances limit 1), 1, case when p.open then 'active' else 'released' end, p.since,
              case when p.open then null else p.since + interval '1 hour' end
       from planned p join planned_deployments d on d.organization_id = p.organization_id and d.n = p.k / 100 order by p.since`,
    );
    await trx.raw(
      `insert into deployment_replicas (deployment_id, organization_id, ordinal, engine_model_uid, gpu_allocation_id, status, created_at, ready_at, stopped_at,
                                        running_since, running_until, accrued_until, gpu_service_key)
       select d.id, p.organization_id, p.k % 100, 'dep-' || replace(d.id::text, '-', '') || '-r' || p.k % 100, p.allocation_id,
              case when p.open then 'ready' else 'stopped' end, p.since, p.since, case when p.open then null else p.since + interval '1 hour' end,
              p.since, case when p.open then null else p.since + interval '1 hour' end,
              case when p.open then date_trunc('minute', :now::timestamptz) - interval '1 minute' else p.since + interval '1 hour' end,
              case when p.open then :serviceKey end
       from planned p join planned_deployments d on d.organization_id = p.organization_id and d.n = p.k / 100 order by p.since`,
      { now: NOW, serviceKey: SERVICE_KEY },
    );
  });
  // As autovacuum leaves the table: statistics (of every row: the table is smaller than ANALYZE's sample).
  await db.raw('analyze deployment_replicas');
  planner = new pg.Client({ connectionString: database.url });
  await planner.connect();
  heavyOrganization = (await db('organizations').where({ slug: 'organization-1' }).first<{ id: number }>('id')).id;
}, 120_000);

afterAll(async () => {
  await planner?.end();
  await db?.destroy();
  await database?.drop();
});

/** The nodes of `plan` that read deployment_replicas: its scans, and the scans of its indexes. */
const replicaNodes = (plan: PlanNode) => nodesOf(plan).filter((node) => node['Relation Name'] === 'deployment_replicas' || node['Index Name']?.startsWith('deployment_replicas'));
const gathers = (plan: PlanNode) => nodesOf(plan).filter((node) => node['Node Type'].startsWith('Gather'));

describe('the usage summary’s plan of a heavy organization’s open replicas', () => {
  it('holds the replicas it was asked for', async () => {
    const { rows } = await db.raw<{ rows: Array<{ heavy: boolean; closed: number; open: number }> }>(
      `select organization_id = ? as heavy, count(*) filter (where running_until is not null)::int as closed, count(*) filter (where running_until is null)::int as open
       from deployment_replicas group by 1 order by 1`,
      [heavyOrganization],
    );
    expect(rows).toEqual([
      { heavy: false, closed: OTHERS.organizations * OTHERS.closed, open: OTHERS.organizations * OTHERS.open },
      { heavy: true, closed: HEAVY.closed, open: HEAVY.open },
    ]);
  });

  it('expects about as many replicas as are open in a custom plan, reads them through the partial index, and gathers no workers', async () => {
    // A statement with its parameters bound is planned for their values: the custom plan a prepared
    // statement's first executions on a new connection get (forced here too, to say so).
    const statement = usageTotalsQuery(db, heavyOrganization, PERIOD, NOW).toSQL().toNative();
    await planner.query('set plan_cache_mode = force_custom_plan');
    let plan: PlanNode;
    try {
      plan = await planOf(planner, statement);
    } finally {
      await planner.query('reset plan_cache_mode');
    }
    const nodes = replicaNodes(plan);
    expect(nodes.map((node) => node['Index Name']).filter(Boolean)).toEqual(['deployment_replicas_metered_by_organization']);
    for (const node of nodes) {
      expect(node['Plan Rows'], `${node['Node Type']} of ${node['Index Name'] ?? node['Relation Name']}`).toBeLessThanOrEqual(HEAVY.open * 5);
      expect(node['Plan Rows'], `${node['Node Type']} of ${node['Index Name'] ?? node['Relation Name']}`).toBeGreaterThanOrEqual(HEAVY.open / 5);
    }
    expect(gathers(plan)).toEqual([]);

    // And the summary counts the open replicas' seconds not closed yet (the minute before NOW), none
    // of the closed ones'.
    const { rows } = await planner.query<{ total_quantity: string }>(statement.sql, statement.bindings as unknown[]);
    expect(rows.map((row) => row.total_quantity)).toEqual([String(HEAVY.open * 60)]);
  });

  it('lists the meter’s work from a partial index of the open replicas, expecting about as many as are open everywhere', async () => {
    const [statement] = await statementsOf(db, () => findGpuMeteringDue(db));
    if (!statement) throw new Error('no statement');
    const nodes = replicaNodes(await planOf(planner, statement));
    // Either index holds every open replica (the same predicate, by deployment or by organization).
    expect(nodes.filter((node) => node['Node Type'] === 'Seq Scan')).toEqual([]);
    expect(nodes.map((node) => node['Index Name']).filter(Boolean)).toEqual([expect.stringMatching(/^deployment_replicas_(gpu_metering|metered_by_organization)$/)]);
    const open = HEAVY.open + OTHERS.organizations * OTHERS.open;
    for (const node of nodes) expect(node['Plan Rows']).toBeLessThanOrEqual(open * 5);
  });
});
