import type { Knex } from 'knex';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase } from '../../src/db/database.ts';
import { listKeysOf, scopableDeployments, scopesInOrganization } from '../../src/api-keys/api-keys.repository.ts';
import { DAY_BUCKET_FROM_OFFSET, findDeploymentOf, listDeploymentsOf, replicaCountsOf, type ListPosition, type Scope } from '../../src/deployments/deployments.repository.ts';
import { eventsAfter } from '../../src/events/events.repository.ts';
import { findRoutingCandidates } from '../../src/inference/inference.repository.ts';
import { listInvitationsOf, listOpenInvitationsTo } from '../../src/invitations/invitations.repository.ts';
import { listMembers } from '../../src/organizations/organizations.repository.ts';
import { listEndpointsOf } from '../../src/webhooks/webhooks.repository.ts';
import { createTestDatabase } from '../helpers/database.ts';
import { genericPlanOf, nodesOf, planOf, statementsOf, type PlanNode } from '../helpers/query-plans.ts';

/**
 * "Listing and reads stay index-backed at a million deployments" (DESIGN.md §4, docs/scaling.md):
 * a million deployments (each with its replica), with the keys, members, invitations, webhook
 * endpoints and events of the largest tenant's organization in proportion, planned by Postgres after
 * VACUUM ANALYZE (as autovacuum leaves a table), and the plans of the queries the API's read routes run read. The SQL
 * is the repositories' own: their functions run on a knex instance whose `query` events (the
 * builders' `toSQL()` with their bindings) are recorded, then each is planned with EXPLAIN (FORMAT
 * JSON). No planner setting is changed (enable_seqscan stays on): the planner picks the index
 * because it is the cheaper plan at this size. A migration that drops or changes one of these
 * indexes fails here.
 */
const DEPLOYMENTS = Number(process.env.QUERY_PLAN_DEPLOYMENTS ?? 1_000_000);
/** Owners: a user with an organization of its own each (the shape: 10,000 users), about 95 deployments each. */
const OWNERS = 10_000;
/** The largest tenant: one user with 5 % of every deployment, in one organization. */
const LARGE_SHARE = 0.05;
/**
 * The largest tenant's organization, beside its deployments, in proportion (5 % of each table, as
 * of the deployments): members, API keys, invitations (a fifth pending), webhook endpoints (the most
 * an organization may have). Every other organization has its owner, two keys, an invitation, and
 * one in ten a webhook endpoint.
 */
const LARGE_ORGANIZATION = { members: 500, keys: 1_000, invitations: 500, endpoints: 20 };
/** How deep the deep pages of the largest tenant start (it has DEPLOYMENTS x LARGE_SHARE). */
const DEEP = Math.round(DEPLOYMENTS * LARGE_SHARE * 0.8);

const INDEX_NODES = ['Index Scan', 'Index Only Scan', 'Bitmap Index Scan'];

/**
 * What a plan reads `tables` with: the indexes it scans (of any table), the index-only scans, and
 * whether any node scans one of `tables` whole or sorts.
 */
function howRead(plan: PlanNode, tables: readonly string[] = ['deployments']) {
  const nodes = nodesOf(plan);
  // A bitmap heap scan names the table, its bitmap index scan child names the index.
  return {
    indexes: [...new Set(nodes.filter((node) => INDEX_NODES.includes(node['Node Type'])).map((node) => node['Index Name']))].sort(),
    sequentialScans: nodes.filter((node) => node['Node Type'] === 'Seq Scan' && tables.includes(node['Relation Name'] ?? '')).map((node) => node['Relation Name']),
    sorts: nodes.filter((node) => node['Node Type'] === 'Sort' || node['Node Type'] === 'Incremental Sort').length,
  };
}

const indexOnly = (plan: PlanNode) => nodesOf(plan).filter((node) => node['Node Type'] === 'Index Only Scan').map((node) => node['Index Name']);

/** The statements `run` sends, and each one's plan. */
async function plansOf(run: () => Promise<unknown>): Promise<Array<{ sql: string; plan: PlanNode }>> {
  const statements = await statementsOf(db, run);
  return Promise.all(statements.map(async (statement) => ({ sql: statement.sql, plan: await planOf(planner, statement) })));
}

let database: { url: string; drop(): Promise<void> };
let db: Knex;
/** A plain connection: EXPLAIN takes the statement with pg's own placeholders. */
let planner: pg.Client;
let large: Scope;
let typical: Scope;
let someId: string;
/** A deployment of the largest tenant, and the position after it: a cursor DEEP rows into its list. */
let largeDeploymentId: string;
let deepPosition: ListPosition;

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
  // Every deployment was placed: its replica 0 on GPUs of one instance, released once it stopped
  // (the running ones' replicas ready, the others' stopped), as provisioning leaves them.
  await db.raw(
    `insert into clusters (name, provider, region, endpoint) values ('plan-cluster', 'aws', 'us-east-1', 'http://plan-cluster.example');
     insert into instances (cluster_id, instance_type_id, engine_worker)
     select c.id, t.id, 'worker-1:30001' from clusters c, instance_types t where c.name = 'plan-cluster' and t.name = 'g5.12xlarge'`,
  );
  await db.raw(
    `with allocated as (
       insert into gpu_allocations (deployment_id, instance_id, gpu_count, status, created_at, released_at)
       select d.id, (select id from instances limit 1), 1, case when d.status = 'running' then 'active' else 'released' end,
              d.created_at, case when d.status = 'running' then null else d.terminated_at end
       from deployments d
       returning id, deployment_id, created_at, released_at
     )
     insert into deployment_replicas (deployment_id, organization_id, ordinal, engine_model_uid, gpu_allocation_id, status, created_at, ready_at, stopped_at)
     select d.id, d.organization_id, 0, 'dep-' || replace(d.id::text, '-', ''), a.id, case when a.released_at is null then 'ready' else 'stopped' end,
            a.created_at, a.created_at, a.released_at
     from allocated a join deployments d on d.id = a.deployment_id`,
  );
  // The largest tenant's organization (owner 1's): more members, keys (each scoped to one of its
  // live deployments), invitations with their emails, webhook endpoints; every other organization a
  // little of each. Events: two for each of the largest tenant's deployments.
  const largeOrganization = `(select current_organization_id from users where email = 'owner-1@example.com')`;
  await db.raw(`insert into memberships (organization_id, user_id, role) select current_organization_id, id, 'super_admin' from users where email like 'owner-%'`);
  await db.raw(
    `insert into users (email, name, current_organization_id) select 'member-' || n || '@example.com', 'Member ' || n, ${largeOrganization} from generate_series(1, ?) n`,
    [LARGE_ORGANIZATION.members],
  );
  await db.raw(`insert into memberships (organization_id, user_id, role) select current_organization_id, id, 'member' from users where email like 'member-%'`);
  await db.raw(
    `insert into api_keys (organization_id, created_by_user_id, name, key_prefix, key_hash, created_at)
     select u.current_organization_id, u.id, 'key ' || k, 'svc-sk-abcdefgh', md5(u.id || ':' || k), now() - make_interval(mins => k)
     from users u cross join generate_series(1, ?) k where u.email like 'owner-%' and (k <= 2 or u.email = 'owner-1@example.com')`,
    [LARGE_ORGANIZATION.keys],
  );
  await db.raw(
    `insert into api_key_deployments (api_key_id, deployment_id)
     select k.id, d.id
     from (select id, organization_id, row_number() over (partition by organization_id order by id) as n from api_keys) k
     join (select id, organization_id, row_number() over (partition by organization_id order by created_at desc) as n, count(*) over (partition by organization_id) as total
           from deployments where status <> 'terminated') d
       on d.organization_id = k.organization_id and d.n = 1 + (k.n - 1) % d.total`,
  );
  await db.raw(
    `insert into invitations (organization_id, invitee_email, invited_by_user_id, role, status, token_hash, expires_at, created_at)
     select u.current_organization_id, 'invitee-' || u.id || '-' || k || '@example.com', u.id, 'member',
            case when k % 5 = 0 then 'pending' else 'accepted' end, md5('invitation ' || u.id || ':' || k),
            now() + interval '7 days' - make_interval(hours => k), now() - make_interval(hours => k)
     from users u cross join generate_series(1, ?) k where u.email like 'owner-%' and (k = 1 or u.email = 'owner-1@example.com')`,
    [LARGE_ORGANIZATION.invitations],
  );
  await db.raw(`insert into emails (to_address, subject, template, status, sent_at, invitation_id) select invitee_email, 'Invitation', 'invitation', 'sent', created_at, id from invitations`);
  await db.raw(
    `insert into webhook_endpoints (organization_id, url, sealed_secret, created_by_user_id)
     select u.current_organization_id, 'https://hooks.example.com/' || u.id || '/' || k, 'sealed', u.id
     from users u cross join generate_series(1, ?) k where u.email like 'owner-%' and ((k = 1 and u.id % 10 = 0) or u.email = 'owner-1@example.com')`,
    [LARGE_ORGANIZATION.endpoints],
  );
  await db.raw(
    `insert into deployment_events (deployment_id, organization_id, type, from_status, to_status, created_at)
     select d.id, d.organization_id, 'deployment.status_changed', s.from_status, s.to_status, d.created_at + make_interval(secs => s.n)
     from deployments d join users u on u.id = d.user_id and u.email = 'owner-1@example.com'
     cross join (values (1, null, 'requested'), (2, 'requested', 'provisioning')) s (n, from_status, to_status)`,
  );
  // As autovacuum leaves the tables: statistics, and the visibility map that index-only scans read.
  await db.raw('vacuum analyze');
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
  const deep = await listDeploymentsOf(db, large, { limit: 1, offset: DEEP });
  largeDeploymentId = deep.rows[0]?.id ?? '';
  if (!deep.next) throw new Error('the largest tenant has no deep page');
  deepPosition = deep.next;
}, 600_000);

afterAll(async () => {
  await planner?.end();
  await db?.destroy();
  await database?.drop();
});

describe(`query plans at ${DEPLOYMENTS.toLocaleString('en')} deployments`, () => {
  it('holds the deployments it was asked for, each with its replica', async () => {
    const [{ count }] = (await db('deployments').count({ count: '*' })) as [{ count: string }];
    expect(Number(count)).toBe(DEPLOYMENTS);
    const [{ count: replicas }] = (await db('deployment_replicas').count({ count: '*' })) as [{ count: string }];
    expect(Number(replicas)).toBe(DEPLOYMENTS);
  });

  for (const [who, scope, page] of [
    ['a typical user, first page', () => typical, () => ({ limit: 20, offset: 0 })],
    ['the largest tenant (5 %), first page', () => large, () => ({ limit: 20, offset: 0 })],
    ['the largest tenant, page 50', () => large, () => ({ limit: 20, offset: 980 })],
    [`the largest tenant, ${DEEP.toLocaleString('en')} rows deep by offset`, () => large, () => ({ limit: 100, offset: DEEP })],
    [`the largest tenant, ${DEEP.toLocaleString('en')} rows deep by cursor`, () => large, () => ({ limit: 100, offset: 0, after: deepPosition })],
  ] as const) {
    it(`lists the deployments of ${who}: ids from an index-only scan of (user, organization, created_at, id), then the rows by primary key and their replicas by their key, nothing sorted or scanned whole`, async () => {
      const statements = await statementsOf(db, () => listDeploymentsOf(db, scope(), page()));
      expect(statements).toHaveLength(2);
      const [countQuery, pageQuery] = statements.sort((a, b) => Number(a.sql.includes(' join ')) - Number(b.sql.includes(' join ')));
      if (!pageQuery || !countQuery) throw new Error('two statements expected');
      // A deep page by offset starts from the owner's day counts: the day it starts in bounds the
      // index scan, and only the rows of that day before the page are skipped.
      const byDay = !('after' in page()) && page().offset >= DAY_BUCKET_FROM_OFFSET;
      const bucket = byDay ? String.raw`with "bucket" as \(select day, through - deployments as before from \([\s\S]+ from deployment_day_counts where user_id = \$1 and organization_id = \$2\s+\) days where through > \$3 order by day desc limit 1\) ` : '';
      const owner = byDay ? String.raw`"user_id" = \$4 and "organization_id" = \$5 and created_at < \(select \(day \+ 1\)::timestamp at time zone 'UTC' from bucket\)` : String.raw`"user_id" = \$1 and "organization_id" = \$2`;
      const offset = byDay ? String.raw` offset \(select \$7::bigint - before from bucket\)` : String.raw`( offset \$\d)?`;
      // The inner query reads only the index's columns: an index-only scan, however deep the page.
      expect(pageQuery.sql).toMatch(
        new RegExp(
          String.raw`^${bucket}select [\s\S]+ inner join \(select "id", "created_at" from "deployments" where ${owner}( and \(created_at, id\) < \(\$3::timestamptz, \$4::uuid\))? order by "created_at" desc, "id" desc limit \$\d${offset}\) as "page" on "page"."id" = "d"."id" cross join lateral \(select count\(\*\) filter [\s\S]+ from deployment_replicas r where r\.deployment_id = d\.id\) as replicas order by "page"."created_at" desc, "page"."id" desc$`,
        ),
      );
      const plan = await planOf(planner, pageQuery);
      // The replicas' counts: one aggregate per row of the page, read by the replicas' (deployment_id, ordinal) key.
      const indexes = ['deployment_replicas_deployment_id_ordinal_key', 'deployments_by_owner', 'deployments_pkey'];
      expect(howRead(plan, ['deployments', 'deployment_day_counts'])).toEqual({ indexes: byDay ? ['deployment_day_counts_pkey', ...indexes] : indexes, sequentialScans: [], sorts: 0 });
      expect(indexOnly(plan)).toEqual(['deployments_by_owner']);

      // `total` is the owner's counter row, whatever the number of deployments.
      expect(countQuery.sql).toMatch(/^select "deployments" from "deployment_counts" where "user_id" = \$1 and "organization_id" = \$2/);
      expect(howRead(await planOf(planner, countQuery), ['deployment_counts'])).toEqual({ indexes: ['deployment_counts_pkey'], sequentialScans: [], sorts: 0 });
    });
  }

  it("walks to the same rows by cursor as by offset, and counts each owner's rows and each owner's day's rows as they are (the triggers saw the bulk insert)", async () => {
    const byOffset = await listDeploymentsOf(db, large, { limit: 5, offset: DEEP + 1 });
    const byCursor = await listDeploymentsOf(db, large, { limit: 5, offset: 0, after: deepPosition });
    expect(byCursor.rows.map((row) => row.id)).toEqual(byOffset.rows.map((row) => row.id));
    expect(byCursor.rows[0]?.id).not.toBe(largeDeploymentId);
    expect(byCursor.total).toBe(Math.round(DEPLOYMENTS * LARGE_SHARE));
    const { rows } = await db.raw<{ rows: Array<{ differing: string }> }>(
      `select count(*) as differing from (select user_id, organization_id, count(*) as deployments from deployments group by 1, 2) rows
       full join deployment_counts c using (user_id, organization_id) where c.deployments is distinct from rows.deployments`,
    );
    expect(rows).toEqual([{ differing: '0' }]);
    const { rows: days } = await db.raw<{ rows: Array<{ differing: string }> }>(
      `select count(*) as differing from (select user_id, organization_id, (created_at at time zone 'UTC')::date as day, count(*)::int as deployments from deployments group by 1, 2, 3) rows
       full join deployment_day_counts c using (user_id, organization_id, day) where c.deployments is distinct from rows.deployments`,
    );
    expect(days).toEqual([{ differing: '0' }]);
  });

  it("estimates the largest tenant's rows from the extended statistics, not as if user and organization were independent", async () => {
    const [countQuery] = await statementsOf(db, () => db('deployments').where({ user_id: large.userId, organization_id: large.organizationId }).count({ count: '*' }));
    if (!countQuery) throw new Error('no statement');
    const scan = nodesOf(await planOf(planner, countQuery)).find((node) => node['Index Name'] === 'deployments_by_owner');
    const actual = Math.round(DEPLOYMENTS * LARGE_SHARE);
    expect(scan?.['Plan Rows']).toBeGreaterThan(actual / 2);
    expect(scan?.['Plan Rows']).toBeLessThan(actual * 2);
  });

  it('gets one deployment by its primary key', async () => {
    const statements = await statementsOf(db, () => findDeploymentOf(db, typical, someId));
    expect(statements).toHaveLength(1);
    const [statement] = statements;
    if (!statement) throw new Error('one statement expected');
    expect(howRead(await planOf(planner, statement))).toEqual({ indexes: ['deployments_pkey'], sequentialScans: [], sorts: 0 });
    expect(await findDeploymentOf(db, typical, someId)).toMatchObject({ id: someId, user_id: typical.userId });
  });

  it('gets one deployment for update by its primary key', async () => {
    const statements = await statementsOf(db, () => db.transaction((trx) => findDeploymentOf(trx, typical, someId, { forUpdate: true })));
    const locking = statements.find((statement) => statement.sql.endsWith('for update'));
    if (!locking) throw new Error('no select … for update');
    expect(howRead(await planOf(planner, locking)).indexes).toEqual(['deployments_pkey']);
  });
});

describe("the other read routes, for the largest tenant's organization", () => {
  /** The tables a route reads for an organization, which grow with the number of tenants. */
  const TENANT_TABLES = ['deployments', 'deployment_replicas', 'api_keys', 'api_key_deployments', 'memberships', 'invitations', 'emails', 'webhook_endpoints', 'deployment_events'];

  it('API keys (GET /v1/organization/api-keys): the keys by organization, their scopes through them, each deployment by primary key', async () => {
    const [keys, scopes] = await plansOf(() => listKeysOf(db, large.organizationId).then(() => scopesInOrganization(db, large.organizationId)));
    if (!keys || !scopes) throw new Error('two statements expected');
    expect(howRead(keys.plan, TENANT_TABLES)).toMatchObject({ indexes: ['api_keys_organization'], sequentialScans: [] });
    // api_key_deployments is small here (a key or two per organization) and may be read whole; deployments never.
    const read = howRead(scopes.plan, TENANT_TABLES);
    expect(read.indexes).toEqual(expect.arrayContaining(['api_keys_organization', 'deployments_pkey']));
    expect(read.sequentialScans.filter((table) => table !== 'api_key_deployments')).toEqual([]);
    expect((await scopesInOrganization(db, large.organizationId)).length).toBe(LARGE_ORGANIZATION.keys);
  });

  it('deployment options (GET /v1/organization/api-keys/deployment-options): the live deployments from the partial index, in its order', async () => {
    const [options] = await plansOf(() => scopableDeployments(db, large.organizationId));
    if (!options) throw new Error('one statement expected');
    expect(options.sql).toContain(`status <> 'terminated'`);
    expect(howRead(options.plan)).toMatchObject({ indexes: ['deployments_live_by_organization'], sequentialScans: [] });
  });

  for (const [who, scope, indexes] of [
    ['an API key (the whole organization)', () => ({ organizationId: large.organizationId }), ['deployments_live_by_organization']],
    ["a session (the user's own)", () => large, ['deployments_live_by_organization']],
    // The user's own rows (deployments_by_owner) or the organization's live ones, whichever the planner finds fewer.
    ['a session of a typical user', () => typical, ['deployments_by_owner', 'deployments_live_by_organization']],
  ] as const) {
    it(`models (GET /v1/models) and inference routing of ${who}: the live deployments from an index, each running one's ready replicas by its key, no sequential scan`, async () => {
      const statements = await plansOf(() => findRoutingCandidates(db, scope()));
      expect(statements).toHaveLength(1);
      const [candidates] = statements;
      if (!candidates) throw new Error('one statement expected');
      expect(candidates.sql).toContain(`d.status <> 'terminated'`);
      const read = howRead(candidates.plan, ['deployments', 'deployment_replicas']);
      expect(read.sequentialScans).toEqual([]);
      const used = read.indexes.filter((index) => index?.startsWith('deployments_'));
      expect(used).toHaveLength(1);
      expect(indexes).toContain(used[0]);
      expect(read.indexes).toContain('deployment_replicas_deployment_id_ordinal_key');
    });
  }

  it('members (GET /v1/organization/members): the memberships by organization', async () => {
    const [members] = await plansOf(() => listMembers(db, large.organizationId));
    if (!members) throw new Error('one statement expected');
    const read = howRead(members.plan, TENANT_TABLES);
    expect(read.indexes).toContain('memberships_organization_id_user_id_key');
    expect(read.sequentialScans).toEqual([]);
  });

  it('invitations of the organization and of an invitee (GET /v1/organization/invitations, GET /v1/invitations): by organization, by email, each latest email by invitation', async () => {
    const [ofOrganization] = await plansOf(() => listInvitationsOf(db, large.organizationId));
    const [toInvitee] = await plansOf(() => listOpenInvitationsTo(db, `invitee-${large.userId}-5@example.com`));
    if (!ofOrganization || !toInvitee) throw new Error('two statements expected');
    for (const [plan, index] of [
      [ofOrganization.plan, 'invitations_organization'],
      [toInvitee.plan, 'invitations_invitee'],
    ] as const) {
      const read = howRead(plan, TENANT_TABLES);
      expect(read.indexes).toEqual(expect.arrayContaining([index, 'emails_invitation']));
      expect(read.sequentialScans).toEqual([]);
    }
  });

  it('webhook endpoints (GET /v1/organization/webhook-endpoints) and deployment events (GET …/events): by organization, by deployment', async () => {
    const [endpoints] = await plansOf(() => listEndpointsOf(db, large.organizationId));
    const [events] = await plansOf(() => eventsAfter(db, largeDeploymentId, undefined, 100));
    if (!endpoints || !events) throw new Error('two statements expected');
    expect(howRead(endpoints.plan, TENANT_TABLES)).toMatchObject({ indexes: ['webhook_endpoints_of_organization'], sequentialScans: [] });
    // A deployment has a handful to a few dozen events: the planner may sort those it reads by index.
    expect(howRead(events.plan, TENANT_TABLES)).toMatchObject({ indexes: ['deployment_events_of_deployment'], sequentialScans: [] });
  });
});

describe('the generic plans prepared statements settle on', () => {
  /** The service prepares every read (src/db/prepared-client.ts): its generic plan must read as the custom one does. */
  const reads: ReadonlyArray<readonly [string, () => Promise<unknown>]> = [
    ["the largest tenant's first page of deployments and its count", () => listDeploymentsOf(db, large, { limit: 20, offset: 0 })],
    [`the largest tenant's deployments ${DEEP.toLocaleString('en')} rows deep by offset`, () => listDeploymentsOf(db, large, { limit: 100, offset: DEEP })],
    [`the largest tenant's deployments ${DEEP.toLocaleString('en')} rows deep by cursor`, () => listDeploymentsOf(db, large, { limit: 100, offset: 0, after: deepPosition })],
    ["a typical user's first page of deployments", () => listDeploymentsOf(db, typical, { limit: 20, offset: 0 })],
    ['one deployment by its primary key', () => findDeploymentOf(db, typical, someId)],
    ["one deployment's replicas' counts", () => replicaCountsOf(db, someId)],
    ["an API key's routing candidates", () => findRoutingCandidates(db, { organizationId: large.organizationId })],
    ["the organization's API keys and their scopes", () => listKeysOf(db, large.organizationId).then(() => scopesInOrganization(db, large.organizationId))],
    ["the organization's members", () => listMembers(db, large.organizationId)],
    ["the organization's invitations", () => listInvitationsOf(db, large.organizationId)],
  ];
  /** The tables that grow with tenants (api_key_deployments, a key or two per organization here, may be read whole). */
  const LARGE_TABLES = ['deployments', 'deployment_replicas', 'api_keys', 'memberships', 'invitations', 'emails', 'users'];
  for (const [what, run] of reads) {
    it(`reads ${what} through every index of its custom plan, no large table scanned whole`, async () => {
      const statements = await statementsOf(db, run);
      expect(statements.length).toBeGreaterThan(0);
      for (const statement of statements) {
        const custom = howRead(await planOf(planner, statement), LARGE_TABLES);
        const generic = howRead(await genericPlanOf(planner, statement), LARGE_TABLES);
        // The generic plan may do more by index than the custom one (a join by primary key, a list in its index's order), never less.
        expect({ sql: statement.sql, indexes: generic.indexes, sequentialScans: generic.sequentialScans }).toEqual({
          sql: statement.sql,
          indexes: expect.arrayContaining(custom.indexes),
          sequentialScans: [],
        });
      }
    });
  }
});
