import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { derived, type Shape } from './db-shape.ts';

/**
 * Seeds the data-scale benchmark's database (bench/db-scale.ts) after the real migrations ran: plain
 * set-based inserts (`generate_series`), in batches, through the tables' own constraints, indexes and
 * triggers, so whatever a later migration hangs on an insert (a partitioned table, a rollup trigger)
 * sees these rows as it would the service's. All of it on one connection (its temporary tables map
 * the seeded owners to their ids).
 *
 * The shape (db-shape.ts, docs/performance.md "Data at scale"): user n owns organization n (as registration makes
 * it) with its billing account; user 1 is the heavy user, a long-lived automation account of
 * organization 1, with most of its deployments terminated long ago and the newest ones running;
 * every other user has about the same number of deployments, one in 40 running and one in 40 failed.
 * Usage rows span the last days in time order (the table's physical order, as appending makes it),
 * the heavy organization's share interleaved with everyone else's; most are hosted-model tokens (what
 * the usage summary prices), the rest through a running deployment. Running deployments have their
 * GPU seconds closed minute by minute up to the last minute, on instances of one seeded cluster.
 * Organizations with a payment processor customer (the heavy one and one in ten) have had their usage
 * older than an hour claimed by a daily usage report, as the reporter would have.
 */

export interface Seeded {
  heavy: Owner;
  typical: Owner;
  /** The organization the insert measurement writes to (not the heavy one, whose summary is timed). */
  insertOrganizationId: number;
  /** An old deployment of each, for the route by id, and a running one of the heavy user (for an API key's scope). */
  heavyDeploymentId: string;
  typicalDeploymentId: string;
  heavyRunningDeploymentId: string;
  /** A pending invitation's token (its preview route). */
  invitationToken: string;
  /** Seconds per step. */
  timings: Record<string, number>;
}

export interface Owner {
  n: number;
  userId: number;
  organizationId: number;
  email: string;
}

type Progress = (line: string) => void;

const fmt = (n: number) => Math.round(n).toLocaleString('en');

export function elapsed(seconds: number): string {
  const m = Math.floor(seconds / 60);
  const s = Math.round(seconds - m * 60);
  return m ? `${m}m${String(s).padStart(2, '0')}s` : `${seconds.toFixed(1)}s`;
}

/**
 * The user the typical figures are taken for: a multiple of ten near the middle, so even (an
 * invitation waits for it) and with a processor customer and subscription (one organization in ten).
 */
export function typicalN(users: number): number {
  return Math.min(users, Math.max(2, 10 * Math.round(users / 20)));
}

export async function seed(client: pg.Client, shape: Shape, options: { batchRows: number; invitationToken: string; progress: Progress; beforeUsage?: (insertOrganizationId: number) => Promise<void> }): Promise<Seeded> {
  const { progress } = options;
  const d = derived(shape);
  const timings: Record<string, number> = {};
  const q = async (sql: string, values: unknown[] = []) => client.query(sql, values);
  const stepStart = () => performance.now();
  const stepEnd = (name: string, started: number, what: string) => {
    const seconds = (performance.now() - started) / 1000;
    timings[name] = (timings[name] ?? 0) + seconds;
    progress(`  ${what} (${elapsed(seconds)})`);
  };

  await q("set synchronous_commit = off; set jit = off; set work_mem = '256MB'; set maintenance_work_mem = '512MB'");
  // One clock for the whole seed: every "now" below is this one.
  const { rows: [clock] } = await q('select now() as now');
  const now = (clock as { now: Date }).now;

  // ---- owners: organizations, users, memberships, billing accounts
  let t = stepStart();
  await q(
    `insert into organizations (name, slug, created_at)
     select case when n = 1 then 'Heavy automation' else 'Organization ' || n end, 'bench-org-' || n, $2::timestamptz - interval '800 days' + n * interval '1 second'
     from generate_series(1, $1::int) n`,
    [shape.users, now],
  );
  await q(
    `insert into users (email, name, current_organization_id, email_verified_at, created_at)
     select 'bench-user-' || n || '@example.com', 'Bench user ' || n, o.id, o.created_at, o.created_at
     from generate_series(1, $1::int) n join organizations o on o.slug = 'bench-org-' || n`,
    [shape.users],
  );
  await q(
    `create temp table bench_owners as
       select n, o.id as org_id, u.id as user_id, (n = 1 or n % 10 = 0) as reports,
              null::integer as api_key_id, null::uuid as deployment_id, null::text as model_name
       from generate_series(1, $1::int) n
       join organizations o on o.slug = 'bench-org-' || n
       join users u on lower(u.email) = 'bench-user-' || n || '@example.com'`,
    [shape.users],
  );
  await q('alter table bench_owners add primary key (n); create unique index on bench_owners (org_id)');
  await q(`insert into memberships (organization_id, user_id, role, created_at) select org_id, user_id, 'super_admin', $1::timestamptz - interval '800 days' from bench_owners`, [now]);
  // The heavy organization's team; every other user also belongs to the next user's organization.
  await q(
    `insert into memberships (organization_id, user_id, role, created_at)
     select h.org_id, b.user_id, case when b.n % 20 = 0 then 'admin' when b.n % 3 = 0 then 'viewer' else 'member' end, $2::timestamptz - make_interval(days => b.n % 700)
     from bench_owners b, bench_owners h where h.n = 1 and b.n between 2 and 1 + $1::int`,
    [shape.heavyMembers, now],
  );
  await q(
    `insert into memberships (organization_id, user_id, role, created_at)
     select o.org_id, b.user_id, case when b.n % 4 = 0 then 'viewer' else 'member' end, $2::timestamptz - make_interval(days => b.n % 300)
     from bench_owners b join bench_owners o on o.n = b.n + 1 where b.n between 2 and $1::int - 1`,
    [shape.users, now],
  );
  // Billing accounts as registration makes them; the heavy organization and one in ten have a processor
  // customer and subscription, the heavy one's period spanning all the seeded usage.
  await q(
    `insert into billing_accounts (organization_id, max_active_resources, processor_customer_id, processor_subscription_id, subscription_status,
                                   default_payment_method_id, current_period_start, current_period_end)
     select org_id, case when n = 1 then 100000 else 5 end,
            case when reports then 'cus_bench_' || n end, case when reports then 'sub_bench_' || n end, case when reports then 'active' end,
            case when reports then 'pm_bench_' || n end,
            case when n = 1 then $2::timestamptz - make_interval(days => $1::int, hours => 1) when reports then date_trunc('month', $2::timestamptz) end,
            case when n = 1 then $2::timestamptz - make_interval(days => $1::int, hours => 1) + make_interval(days => $1::int + 1)
                 when reports then date_trunc('month', $2::timestamptz) + interval '1 month' end
     from bench_owners`,
    [shape.usageDays, now],
  );
  const { rows: [insertOrg] } = await q(`insert into organizations (name, slug) values ('Usage insert bench', 'bench-insert') returning id`);
  const insertOrganizationId = (insertOrg as { id: number }).id;
  await q('insert into billing_accounts (organization_id, max_active_resources) values ($1, 5)', [insertOrganizationId]);
  await q(
    `insert into invoices (processor_invoice_id, billing_account_id, status, collection_method, amount_due, amount_paid, currency, period_start, period_end, created)
     select 'in_bench_' || b.n || '_' || k, a.id, 'paid', 'charge_automatically', 100000 + k * 137, 100000 + k * 137, 'usd',
            $1::timestamptz - make_interval(months => k + 1), $1::timestamptz - make_interval(months => k), $1::timestamptz - make_interval(months => k)
     from bench_owners b join billing_accounts a on a.organization_id = b.org_id, generate_series(1, 24) k where b.n = 1`,
    [now],
  );
  stepEnd('owners', t, `${fmt(shape.users)} users and organizations, memberships, billing accounts`);

  // ---- API keys: the heavy organization's mostly revoked over the years, two of everyone else's (one revoked)
  t = stepStart();
  await q(
    `insert into api_keys (organization_id, created_by_user_id, name, key_prefix, key_hash, status, revoked_at, allow_hosted_models, created_at)
     select b.org_id, b.user_id, 'key ' || k, 'svc-sk-' || substr(md5(b.n || ':' || k), 1, 8),
            encode(sha256(convert_to('bench-key:' || b.n || ':' || k, 'UTF8')), 'hex'),
            case when k % 10 = 0 then 'active' else 'revoked' end,
            case when k % 10 = 0 then null else $2::timestamptz - make_interval(hours => $1::int - k) + interval '30 minutes' end,
            true, $2::timestamptz - make_interval(hours => $1::int - k)
     from bench_owners b, generate_series(1, $1::int) k where b.n = 1`,
    [shape.heavyApiKeys, now],
  );
  await q(
    `insert into api_keys (organization_id, created_by_user_id, name, key_prefix, key_hash, status, revoked_at, allow_hosted_models, created_at)
     select b.org_id, b.user_id, 'key ' || k, 'svc-sk-' || substr(md5(b.n || ':' || k), 1, 8),
            encode(sha256(convert_to('bench-key:' || b.n || ':' || k, 'UTF8')), 'hex'),
            case when k = 2 then 'active' else 'revoked' end, case when k = 2 then null else $1::timestamptz - interval '90 days' end,
            true, $1::timestamptz - make_interval(days => 200 - k * 50)
     from bench_owners b, generate_series(1, 2) k where b.n > 1`,
    [now],
  );
  await q(
    `update bench_owners b set api_key_id = k.id
     from (select distinct on (organization_id) organization_id, id from api_keys where status = 'active' order by organization_id, created_at desc, id desc) k
     where k.organization_id = b.org_id`,
  );
  stepEnd('api_keys', t, `${fmt(shape.heavyApiKeys + 2 * (shape.users - 1))} API keys`);

  // ---- invitations (each with its email), one pending to the heavy user and to every even user
  t = stepStart();
  await q(
    `insert into invitations (organization_id, invitee_email, invited_by_user_id, role, status, token_hash, expires_at, responded_at, created_at)
     select b.org_id, 'invitee-' || k || '@example.net', b.user_id, case when k % 7 = 0 then 'viewer' else 'member' end, s.status,
            encode(sha256(convert_to('bench-invitation:' || b.n || ':' || k, 'UTF8')), 'hex'),
            case when s.status = 'pending' then $2::timestamptz + interval '6 days' else c.created_at + interval '7 days' end,
            case when s.status in ('accepted', 'revoked') then c.created_at + interval '1 hour' end,
            c.created_at
     from bench_owners b, generate_series(1, $1::int) k
     cross join lateral (select case k % 10 when 0 then 'pending' when 7 then 'expired' when 8 then 'expired' when 9 then 'revoked' else 'accepted' end as status) s
     cross join lateral (select case when s.status = 'pending' then $2::timestamptz - make_interval(mins => k) else $2::timestamptz - make_interval(hours => $1::int - k + 200) end as created_at) c
     where b.n = 1`,
    [shape.heavyInvitations, now],
  );
  await q(
    `insert into invitations (organization_id, invitee_email, invited_by_user_id, role, status, token_hash, expires_at, created_at)
     select b.org_id, 'bench-user-' || invitee || '@example.com', b.user_id, 'member', 'pending',
            encode(sha256(convert_to('bench-invitation:' || b.n || ':to:' || invitee, 'UTF8')), 'hex'), $2::timestamptz + interval '5 days', $2::timestamptz - interval '2 days'
     from bench_owners b cross join lateral (select case when b.n = 2 then 1 else b.n + 2 end as invitee) i
     where b.n % 2 = 0 and i.invitee <= $1::int`,
    [shape.users, now],
  );
  await q(
    `insert into invitations (organization_id, invitee_email, invited_by_user_id, role, status, token_hash, expires_at, created_at)
     select b.org_id, 'preview@example.net', b.user_id, 'member', 'pending', encode(sha256(convert_to($1::text, 'UTF8')), 'hex'), $2::timestamptz + interval '6 days', $2::timestamptz - interval '1 minute'
     from bench_owners b where b.n = 1`,
    [options.invitationToken, now],
  );
  await q(
    `insert into emails (to_address, subject, template, status, attempts, sent_at, invitation_id, created_at)
     select i.invitee_email, 'You are invited', 'invitation', 'sent', 1, i.created_at + interval '2 seconds', i.id, i.created_at
     from invitations i join bench_owners b on b.org_id = i.organization_id order by i.id`,
  );
  stepEnd('invitations', t, `${fmt(shape.heavyInvitations + Math.floor(shape.users / 2) + 1)} invitations and their emails`);

  // ---- a cluster, its instances, and the deployments
  t = stepStart();
  const instances = Math.max(1, Math.ceil((d.heavyRunning + d.typicalRunning) / 4));
  await q(`insert into clusters (name, provider, region, endpoint, status) values ('bench-cluster', 'aws', 'us-east-1', 'http://127.0.0.1:9', 'active')`);
  await q(
    `insert into instances (cluster_id, instance_type_id, engine_worker)
     select c.id, t.id, 'bench-worker-' || n from clusters c, instance_types t, generate_series(1, $1::int) n
     where c.name = 'bench-cluster' and t.name = 'g5.12xlarge'`,
    [instances],
  );
  await q(
    `create temp table bench_instances as select row_number() over (order by i.id) - 1 as k, i.id, i.cluster_id
     from instances i join clusters c on c.id = i.cluster_id where c.name = 'bench-cluster';
     create temp table bench_models as select row_number() over (order by sort_order, model_name) - 1 as k, id, model_name
     from deployable_models where enabled and model_type = 'LLM';
     analyze bench_owners, bench_instances, bench_models`,
  );
  const { rows: [modelCount] } = await q('select count(*)::int as n from bench_models');
  if (!(modelCount as { n: number }).n) throw new Error('the catalog has no enabled LLM (the migrations seed it)');
  // Deployment i: the heavy user's j-th newest for i <= H, else typical user n's j-th newest. Spread over
  // two years (the heavy user) or one (the others); inserted oldest first, window by window, so the
  // table's physical order is time order as the service's inserts make it.
  const H = shape.heavyDeployments;
  const others = shape.users - 1;
  const heavyStepSeconds = (730 * 86400) / H;
  const typicalStepSeconds = (365 * 86400) / Math.max(1, d.perTypicalUser);
  const windows = Math.max(1, Math.ceil(shape.deployments / options.batchRows));
  for (let w = 0; w < windows; w++) {
    const from = 730 * 86400 * (1 - w / windows);
    const to = 730 * 86400 * (1 - (w + 1) / windows);
    await q(
      `insert into deployments (user_id, organization_id, deployable_model_id, model_name, model_format, model_size_in_billions, quantization, model_engine,
                                status, cluster_id, instance_id, engine_model_uid, selected_instance_type, selection_reason, failure_stage, failure_reason,
                                created_at, status_changed_at, terminated_at)
       select o.user_id, o.org_id, m.id, m.model_name, 'pytorch', 7, 'none', 'vLLM',
              x.status, case when x.status = 'running' then ins.cluster_id end, case when x.status = 'running' then ins.id end,
              case when x.status = 'running' then 'bench-' || x.i end, case when x.status <> 'failed' then 'g5.12xlarge' end,
              case when x.status <> 'failed' then 'cheapest instance type with the GPU memory the model needs' end,
              case when x.status = 'failed' then 'capacity' end, case when x.status = 'failed' then 'No instance had the GPUs free (seeded).' end,
              x.created_at, case when x.status = 'terminated' then x.created_at + interval '1 hour' else x.created_at end,
              case when x.status = 'terminated' then x.created_at + interval '1 hour' end
       from (
         select i, n, j, $9::timestamptz - make_interval(secs => age) as created_at,
                case when n = 1 then case when j <= $5::int then (case when j % 5 = 0 then 'failed' else 'running' end) else 'terminated' end
                     else case j % 40 when 1 then 'running' when 2 then 'failed' else 'terminated' end end as status
         from (
           select i,
                  case when i <= $1::int then 1 else 2 + (i - $1::int - 1) % $2::int end as n,
                  case when i <= $1::int then i else (i - $1::int - 1) / $2::int + 1 end as j
           from generate_series(1, $3::int) i
         ) ij
         cross join lateral (select case when n = 1 then 60 + (j - 1) * $6::float8 else 60 + (j - 1) * $7::float8 + (n % 3600) end as age) a
       ) x
       join bench_owners o on o.n = x.n
       join bench_models m on m.k = x.i % (select count(*) from bench_models)
       join bench_instances ins on ins.k = x.i % $4::int
       where x.created_at > $9::timestamptz - make_interval(secs => $10::float8) and x.created_at <= $9::timestamptz - make_interval(secs => $8::float8)
       order by x.created_at`,
      [H, others, shape.deployments, instances, d.heavyActive, heavyStepSeconds, typicalStepSeconds, w === windows - 1 ? -1 : to, now, w === 0 ? 1e10 : from],
    );
    progress(`  deployments: window ${w + 1}/${windows} (${elapsed((performance.now() - t) / 1000)})`);
  }
  const { rows: [deploymentCount] } = await q('select count(*)::int as n from deployments');
  if ((deploymentCount as { n: number }).n !== shape.deployments) throw new Error(`seeded ${(deploymentCount as { n: number }).n} deployments, not ${shape.deployments}`);
  // GPUs of the running ones: an allocation each, and their seconds accrued up to the last whole minute.
  await q(
    `insert into gpu_allocations (deployment_id, instance_id, gpu_count, created_at)
     select id, instance_id, 1, created_at from deployments where status = 'running' and instance_id is not null;
     update deployments d set gpu_allocation_id = a.id from gpu_allocations a where a.deployment_id = d.id and a.status = 'active';`,
  );
  // From the migrations of 2026-12-01 on, a deployment serves through its replica (one here, ready, on
  // its allocation), which holds the GPU seconds bookkeeping the deployment held before.
  const { rows: [replicaTable] } = await q("select to_regclass('deployment_replicas') is not null as present");
  const replicas = (replicaTable as { present: boolean }).present;
  if (replicas) {
    await q(
      `insert into deployment_replicas (deployment_id, organization_id, ordinal, engine_model_uid, gpu_allocation_id, status, created_at)
       select d.id, d.organization_id, 0, d.engine_model_uid, a.id, 'ready', a.created_at
       from deployments d join gpu_allocations a on a.id = d.gpu_allocation_id where d.status = 'running'`,
    );
  }
  const metered = replicas ? { table: 'deployment_replicas', serving: 'ready' } : { table: 'deployments', serving: 'running' };
  const { rows: running } = await q(
    `select (organization_id = (select org_id from bench_owners where n = 1)) as heavy, count(*)::int as n
     from deployments where status = 'running' group by 1`,
  );
  const heavyRunning = running.find((row) => row.heavy)?.n ?? 0;
  const typicalRunning = running.find((row) => !row.heavy)?.n ?? 0;
  const heavyMinutes = heavyRunning ? Math.max(1, Math.round(shape.gpuIntervals / 2 / heavyRunning)) : 0;
  const typicalMinutes = typicalRunning ? Math.max(1, Math.round((shape.gpuIntervals - shape.gpuIntervals / 2) / typicalRunning)) : 0;
  await q(
    `update ${metered.table} set running_since = date_trunc('minute', $3::timestamptz) - make_interval(mins => case when organization_id = (select org_id from bench_owners where n = 1) then $1::int else $2::int end),
                            accrued_until = date_trunc('minute', $3::timestamptz)
     where status = '${metered.serving}'`,
    [heavyMinutes, typicalMinutes, now],
  );
  if (replicas) {
    await q(
      `update deployment_replicas set created_at = least(created_at, running_since), ready_at = running_since where status = 'ready';
       update deployments d set created_at = least(d.created_at, r.running_since), status_changed_at = r.running_since
       from deployment_replicas r where r.deployment_id = d.id and d.status = 'running'`,
    );
  } else {
    await q(`update deployments set created_at = least(created_at, running_since), status_changed_at = running_since where status = 'running'`);
  }
  stepEnd('deployments', t, `${fmt(shape.deployments)} deployments (${fmt(heavyRunning + typicalRunning)} running on ${fmt(instances)} instances)`);

  // One running deployment per organization carries its dedicated-deployment usage.
  await q(
    `update bench_owners b set deployment_id = r.id, model_name = r.model_name
     from (select distinct on (organization_id) organization_id, id, model_name from deployments where status = 'running' order by organization_id, created_at desc) r
     where r.organization_id = b.org_id;
     analyze bench_owners`,
  );

  // ---- usage reports: one a day per meter of each organization with a processor customer, sent
  t = stepStart();
  await q('create temp table bench_reports (org_id integer, meter text, day integer, id bigint, reported_at timestamptz)');
  await q(
    `with made as (
       insert into usage_reports (organization_id, meter, customer_id, quantity, amount, cumulative_amount, cumulative_micros, value, identifier, usage_at, created_at, reported_at)
       select b.org_id, m.meter, 'cus_bench_' || b.n, 0, 0, 0, 0, 0, 'bench-' || gen_random_uuid(),
              $2::timestamptz - make_interval(days => $1::int - day - 1), $2::timestamptz - make_interval(days => $1::int - day - 1) + interval '1 minute',
              $2::timestamptz - make_interval(days => $1::int - day - 1) + interval '2 minutes'
       from bench_owners b, generate_series(0, $1::int - 1) day, (values ('gpu_instance_seconds'), ('hosted_tokens')) m (meter)
       where b.reports
       returning id, organization_id, meter, usage_at, reported_at
     )
     insert into bench_reports select organization_id, meter, $1::int - 1 - extract(day from $2::timestamptz - usage_at)::int, id, reported_at from made`,
    [shape.usageDays, now],
  );
  await q('create index on bench_reports (org_id, meter, day); analyze bench_reports');
  stepEnd('usage_reports', t, 'daily usage reports of the reporting organizations');

  // ---- GPU intervals: every closed minute of the running deployments, oldest first
  t = stepStart();
  const intervalsLoad = await withoutSecondaryIndexes(client, 'gpu_usage_intervals');
  // The running deployments' GPU services (the view the metering reads), once, with fresh statistics:
  // joined per interval, the view's plan on unanalyzed tables grows with running deployments times instances.
  await q(`analyze deployments, gpu_allocations, instances${replicas ? ', deployment_replicas' : ''}`);
  await q(
    replicas
      ? `create temp table bench_running as
           select r.deployment_id as id, r.id as replica_id, r.organization_id, r.running_since, r.accrued_until, s.service_key
           from deployment_replicas r join deployment_gpu_services s on s.replica_id = r.id
           where r.status = 'ready' and s.service_key is not null`
      : `create temp table bench_running as
           select d.id, null::uuid as replica_id, d.organization_id, d.running_since, d.accrued_until, s.service_key
           from deployments d join deployment_gpu_services s on s.deployment_id = d.id
           where d.status = 'running' and s.service_key is not null`,
  );
  await q('analyze bench_running');
  // The key a deployment stores as it enters running (migrations of 2026-11-26 on).
  const { rows: [serviceKeyColumn] } = await q(
    "select exists (select 1 from information_schema.columns where table_name = 'deployments' and column_name = 'gpu_service_key') as present",
  );
  if (replicas) {
    await q('update deployment_replicas r set gpu_service_key = b.service_key from bench_running b where b.replica_id = r.id');
  } else if ((serviceKeyColumn as { present: boolean }).present) {
    await q('update deployments d set gpu_service_key = r.service_key from bench_running r where r.id = d.id');
  }
  if (shape.gpuIntervals > 0 && heavyRunning + typicalRunning > 0) {
    const longest = Math.max(heavyMinutes, typicalMinutes);
    const intervalWindows = Math.max(1, Math.ceil(shape.gpuIntervals / options.batchRows));
    for (let w = 0; w < intervalWindows; w++) {
      // Minutes before the last whole minute, [fromMin, toMin).
      const fromMinute = Math.ceil((longest * (intervalWindows - w)) / intervalWindows);
      const toMinute = Math.ceil((longest * (intervalWindows - w - 1)) / intervalWindows);
      await q(
        `insert into gpu_usage_intervals (deployment_id, ${replicas ? 'replica_id, ' : ''}organization_id, service_key, started_at, ended_at, usage_report_id, reported_at)
         select d.id, ${replicas ? 'd.replica_id, ' : ''}d.organization_id, d.service_key, t, t + interval '1 minute', r.id, r.reported_at
         from bench_running d
         cross join lateral generate_series(greatest(d.running_since, d.accrued_until - make_interval(mins => $1::int)),
                                            d.accrued_until - make_interval(mins => $2::int + 1), interval '1 minute') t
         left join bench_owners b on b.org_id = d.organization_id and b.reports and t + interval '1 minute' < $4::timestamptz - interval '1 hour'
         left join bench_reports r on r.org_id = b.org_id and r.meter = 'gpu_instance_seconds'
                                   and r.day = floor(extract(epoch from t + interval '1 minute' - ($4::timestamptz - make_interval(days => $3::int))) / 86400)::int
         order by t, d.id`,
        [fromMinute, toMinute, shape.usageDays, now],
      );
      progress(`  GPU intervals: window ${w + 1}/${intervalWindows} (${elapsed((performance.now() - t) / 1000)})`);
    }
  }
  progress(`  GPU intervals: ${await intervalsLoad.restore()} (${elapsed((performance.now() - t) / 1000)})`);
  const { rows: [intervalCount] } = await q('select count(*)::int as n from gpu_usage_intervals');
  stepEnd('gpu_usage_intervals', t, `${fmt((intervalCount as { n: number }).n)} GPU intervals`);

  await options.beforeUsage?.(insertOrganizationId);

  // ---- usage rows, in time order, the heavy organization's share interleaved with the others'
  t = stepStart();
  // A table partitioned by month with a function that makes a month's partition (as the service's
  // scheduled job does ahead of time): the seeded months get theirs first, as they would have had.
  const { rows: [partitions] } = await q("select to_regprocedure('ensure_usage_records_partition(date)') is not null as made");
  if ((partitions as { made: boolean }).made) {
    await q(
      `select ensure_usage_records_partition(m::date)
       from generate_series(date_trunc('month', $1::timestamptz - make_interval(days => $2::int), 'UTC'), date_trunc('month', $1::timestamptz, 'UTC'), interval '1 month') m`,
      [now, shape.usageDays],
    );
    progress('  usage rows: the monthly partitions of the seeded days made');
  }
  const usageLoad = await withoutSecondaryIndexes(client, 'usage_records');
  const R = shape.usageRows;
  const spanSeconds = shape.usageDays * 86400;
  for (let lo = 1; lo <= R; lo += options.batchRows) {
    const hi = Math.min(R, lo + options.batchRows - 1);
    await q(
      `insert into usage_records (request_id, organization_id, deployment_id, api_key_id, user_id, route, model,
                                  prompt_tokens, completion_tokens, total_tokens, unit, quantity, outcome, estimated, created_at, usage_report_id, reported_at)
       select 'req_' || md5('bench' || x.r), o.org_id, case when x.dedicated then o.deployment_id end, o.api_key_id, null,
              x.route, coalesce(case when x.dedicated then o.model_name end, x.model),
              x.prompt, x.completion, x.prompt + x.completion, 'token', x.prompt + x.completion,
              case when x.r % 100 = 0 then 'aborted' else 'completed' end, x.r % 100 = 0, x.created_at, rep.id, rep.reported_at
       from (
         select r, n, dedicated, created_at, model, prompt,
                case when model in ('bge-m3', 'bge-reranker-v2-m3') and not dedicated then 0 else 1 + (r * 53) % 800 end as completion,
                case when dedicated or model not in ('bge-m3', 'bge-reranker-v2-m3') then '/v1/chat/completions' when model = 'bge-m3' then '/v1/embeddings' else '/v1/rerank' end as route
         from (
           select r,
                  case when floor(r * $1::float8) > floor((r - 1) * $1::float8) then 1 else 2 + (r * 2654435761) % ($2::int - 1) end as n,
                  (r * 7919) % 1000 < $3::float8 * 1000 as dedicated,
                  $6::timestamptz - make_interval(secs => $4::float8 * (1 - (r - 0.5) / $5::float8)) as created_at,
                  case when (r * 31) % 20 < 11 then 'qwen2.5-instruct' when (r * 31) % 20 < 16 then 'llama-3.1-instruct'
                       when (r * 31) % 20 < 19 then 'bge-m3' else 'bge-reranker-v2-m3' end as model,
                  20 + (r * 37) % 2000 as prompt
           from generate_series($7::bigint, $8::bigint) r
         ) a
       ) x
       join bench_owners o on o.n = x.n
       left join bench_reports rep on o.reports and rep.org_id = o.org_id and rep.meter = 'hosted_tokens' and not (x.dedicated and o.deployment_id is not null)
                                  and x.created_at < $6::timestamptz - interval '1 hour'
                                  and rep.day = floor(extract(epoch from x.created_at - ($6::timestamptz - make_interval(secs => $4::float8))) / 86400)::int`,
      [shape.heavyUsageShare, shape.users, shape.deploymentUsageShare, spanSeconds, R, now, lo, hi],
    );
    const seconds = (performance.now() - t) / 1000;
    progress(`  usage rows: ${fmt(hi)} / ${fmt(R)} (${fmt(hi / seconds)} rows/s, ${elapsed(seconds)})`);
  }
  const restoring = performance.now();
  const restored = await usageLoad.restore();
  progress(`  usage rows: ${restored} (${elapsed((performance.now() - restoring) / 1000)})`);
  stepEnd('usage_records', t, `${fmt(R)} usage rows`);

  const owner = async (n: number): Promise<Owner> => {
    const { rows } = await q('select b.user_id, b.org_id from bench_owners b where b.n = $1', [n]);
    const row = rows[0] as { user_id: number; org_id: number } | undefined;
    if (!row) throw new Error(`no seeded user ${n}`);
    return { n, userId: row.user_id, organizationId: row.org_id, email: `bench-user-${n}@example.com` };
  };
  const heavy = await owner(1);
  const typical = await owner(typicalN(shape.users));
  const oldest = async (o: Owner, status?: string) => {
    const { rows } = await q(
      `select id from deployments where user_id = $1 and organization_id = $2 ${status ? 'and status = $3' : ''} order by created_at ${status ? 'desc' : 'asc'} limit 1`,
      status ? [o.userId, o.organizationId, status] : [o.userId, o.organizationId],
    );
    const id = (rows[0] as { id: string } | undefined)?.id;
    if (!id) throw new Error(`user ${o.n} has no ${status ?? ''} deployment`);
    return id;
  };
  return {
    heavy,
    typical,
    insertOrganizationId,
    heavyDeploymentId: await oldest(heavy),
    typicalDeploymentId: await oldest(typical),
    heavyRunningDeploymentId: await oldest(heavy, 'running'),
    invitationToken: options.invitationToken,
    timings,
  };
}

/** The users and ids a reused database was seeded with (BENCH_DB_REUSE): read back from the rows. */
export async function seededIn(client: pg.Client, shape: Shape, invitationToken: string): Promise<Omit<Seeded, 'timings'>> {
  const owner = async (n: number): Promise<Owner> => {
    const email = `bench-user-${n}@example.com`;
    const { rows } = await client.query('select id, current_organization_id from users where lower(email) = $1', [email]);
    const row = rows[0] as { id: number; current_organization_id: number } | undefined;
    if (!row) throw new Error(`the reused database has no ${email}: was it seeded by this benchmark with the same BENCH_DB_USERS?`);
    return { n, userId: row.id, organizationId: row.current_organization_id, email };
  };
  const heavy = await owner(1);
  const typical = await owner(typicalN(shape.users));
  const one = async (sql: string, values: unknown[]) => {
    const { rows } = await client.query(sql, values);
    const value = (rows[0] as { id: string | number } | undefined)?.id;
    if (value === undefined) throw new Error(`not found in the reused database: ${sql}`);
    return value;
  };
  const oldestOf = (o: Owner) => one('select id from deployments where user_id = $1 and organization_id = $2 order by created_at asc limit 1', [o.userId, o.organizationId]);
  await client.query(
    `update invitations set token_hash = encode(sha256(convert_to($1::text, 'UTF8')), 'hex'), expires_at = now() + interval '6 days'
     where invitee_email = 'preview@example.net' and status = 'pending'`,
    [invitationToken],
  );
  return {
    heavy,
    typical,
    insertOrganizationId: Number(await one(`select id from organizations where slug = 'bench-insert'`, [])),
    heavyDeploymentId: String(await oldestOf(heavy)),
    typicalDeploymentId: String(await oldestOf(typical)),
    heavyRunningDeploymentId: String(
      await one(`select id from deployments where user_id = $1 and organization_id = $2 and status = 'running' order by created_at desc limit 1`, [heavy.userId, heavy.organizationId]),
    ),
    invitationToken,
  };
}

/**
 * A bulk load's usual preparation, whatever the migrations made of the table: its indexes and its
 * primary-key, unique, exclusion and foreign-key constraints are dropped (checks, defaults and
 * triggers stay, so a trigger maintaining rollups sees every row), and `restore` builds them again
 * from their own definitions, as they were, once the rows are in: one sort per index instead of
 * twenty million random inserts into it, one join per foreign key instead of a lookup per row. A
 * constraint something else depends on (a key another table references) stays in place. The rebuilt
 * indexes are packed tighter than ones grown row by row (docs/performance.md, Data at scale).
 */
export async function withoutSecondaryIndexes(client: pg.Client, table: string): Promise<{ restore(): Promise<string> }> {
  const { rows: constraints } = await client.query<{ name: string; definition: string }>(
    `select conname as name, pg_get_constraintdef(oid) as definition from pg_constraint
     where conrelid = $1::regclass and contype in ('p', 'f', 'u', 'x') and conparentid = 0 order by contype = 'f', contype, conname`,
    [table],
  );
  const { rows: indexes } = await client.query<{ name: string; definition: string }>(
    `select c.relname as name, pg_get_indexdef(i.indexrelid) as definition
     from pg_index i join pg_class c on c.oid = i.indexrelid
     where i.indrelid = $1::regclass
       and not exists (select 1 from pg_constraint k where k.conrelid = i.indrelid and k.conindid = i.indexrelid)
     order by c.relname`,
    [table],
  );
  const dropped: Array<{ name: string; definition: string }> = [];
  for (const constraint of constraints) {
    try {
      await client.query(`alter table ${client.escapeIdentifier(table)} drop constraint ${client.escapeIdentifier(constraint.name)}`);
      dropped.push(constraint);
    } catch {
      // Another object depends on it: it stays.
    }
  }
  for (const index of indexes) await client.query(`drop index ${client.escapeIdentifier(index.name)}`);
  return {
    async restore() {
      await client.query("set maintenance_work_mem = '1GB'; set max_parallel_maintenance_workers = 2");
      // A partitioned table's index is defined ON ONLY the parent; built here for every partition.
      for (const index of indexes) await client.query(index.definition.replace(' ON ONLY ', ' ON '));
      for (const constraint of dropped) {
        await client.query(`alter table ${client.escapeIdentifier(table)} add constraint ${client.escapeIdentifier(constraint.name)} ${constraint.definition}`);
      }
      return `${indexes.length} indexes and ${dropped.length} constraints rebuilt`;
    },
  };
}
