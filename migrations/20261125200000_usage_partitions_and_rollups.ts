import type { Knex } from 'knex';

/**
 * Usage at scale (docs/scaling.md, "Usage at scale"):
 *
 * - `usage_records` becomes a table partitioned by month of `created_at` (UTC): one partition per
 *   month, `usage_records_YYYY_MM`, created ahead by the `maintain-usage-partitions` job through
 *   `ensure_usage_records_partition(month)`, and a default partition that takes a row for a month
 *   with no partition yet (the function moves such rows into the month's partition when it is
 *   created). Old months are dropped whole once everything billable in them was reported
 *   (src/metering/usage-partitions.ts). A partitioned table's unique keys include the partition key:
 *   the primary key is (created_at, usage_id), the service stamping `created_at` on the record when
 *   it makes it, so a retried batch is still written once; time first, so inserts go to the index's
 *   last pages instead of a random page of a random uuid's (which, at 20 million rows, made each
 *   insert read and rewrite pages all over an index larger than memory). The index on `request_id` (a label nothing looks up) and the plain
 *   (organization_id, created_at) index go, and so does the index on `id` (still the order reports
 *   claim records in, through `usage_records_unclaimed`): each index costs every insert. The
 *   summary's index is partial and covering. The foreign keys to the deployment, the API key and the
 *   user go too: nothing deletes those rows (keys are revoked, deployments terminated), the proxy
 *   writes ids it has just read, and each checked key cost every record a lookup and a share lock
 *   on the proxy's hottest rows (the key's, the deployment's); the organization's stays (its
 *   deletion cascades).
 * - `usage_rollups`: per organization, meter, hour (UTC) and item (the model of hosted tokens, the
 *   service key of GPU seconds), the quantity used. Statement triggers on both usage tables append
 *   each insert's sums to `usage_rollup_deltas` in the insert's transaction (a record skipped by
 *   `on conflict do nothing` is not counted), and the `compact-usage-rollups` job folds the deltas
 *   into the rollups every minute: appending, not updating a row per organization and hour on every
 *   insert, which made each insert rewrite the same hot rows (measured: inserts 10 to 60 times
 *   slower as their dead versions piled up). The usage summary reads rollups and deltas for whole
 *   hours, and only the partial hours at a period's edges from the raw rows, through
 *   `usage_records_hosted` and `gpu_usage_intervals_span`.
 *
 * The existing rows are copied into the partitioned table and rolled up in this migration's
 * transaction (writes of usage wait for it).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table usage_rollups (
      organization_id integer not null references organizations (id) on delete cascade,
      meter text not null check (meter in ('gpu_instance_seconds', 'hosted_tokens')),
      hour timestamptz not null check (hour = date_trunc('hour', hour, 'UTC')),
      item text not null,
      quantity bigint not null check (quantity >= 0),
      -- With the quantity: the summary reads an organization's hours from the index alone, not
      -- from heap pages spread over the table (85 ms cold for 2,000 rows in make bench-db).
      primary key (organization_id, hour, meter, item) include (quantity)
    );
    create table usage_rollup_deltas (
      id bigint generated always as identity primary key,
      organization_id integer not null references organizations (id) on delete cascade,
      meter text not null check (meter in ('gpu_instance_seconds', 'hosted_tokens')),
      hour timestamptz not null check (hour = date_trunc('hour', hour, 'UTC')),
      item text not null,
      quantity bigint not null check (quantity >= 0)
    );
    create index usage_rollup_deltas_organization on usage_rollup_deltas (organization_id, hour);

    alter table usage_records rename to usage_records_unpartitioned;
    create sequence usage_records_id_sequence;
    select setval('usage_records_id_sequence', coalesce((select max(id) from usage_records_unpartitioned), 0) + 1, false);

    create table usage_records (
      id bigint not null default nextval('usage_records_id_sequence'),
      usage_id uuid not null default gen_random_uuid(),
      request_id text not null,
      organization_id integer not null references organizations (id) on delete cascade,
      deployment_id uuid,
      api_key_id integer,
      user_id integer,
      route text not null,
      model text not null,
      prompt_tokens integer not null default 0,
      completion_tokens integer not null default 0,
      total_tokens integer not null default 0,
      unit text not null default 'token' check (unit in ('token', 'image', 'request')),
      quantity bigint not null default 0 check (quantity >= 0),
      outcome text not null default 'completed' check (outcome in ('completed', 'aborted')),
      estimated boolean not null default false,
      usage_report_id bigint references usage_reports (id) on delete set null,
      reported_at timestamptz,
      created_at timestamptz not null default now()
    ) partition by range (created_at);
    alter sequence usage_records_id_sequence owned by usage_records.id;
    create table usage_records_default partition of usage_records default;

    insert into usage_records (id, usage_id, request_id, organization_id, deployment_id, api_key_id, user_id, route, model,
      prompt_tokens, completion_tokens, total_tokens, unit, quantity, outcome, estimated, usage_report_id, reported_at, created_at)
    select id, usage_id, request_id, organization_id, deployment_id, api_key_id, user_id, route, model,
      prompt_tokens, completion_tokens, total_tokens, unit, quantity, outcome, estimated, usage_report_id, reported_at, created_at
    from usage_records_unpartitioned;
    drop table usage_records_unpartitioned;

    alter table usage_records add constraint usage_records_pkey primary key (created_at, usage_id);
    create index usage_records_hosted on usage_records (organization_id, created_at) include (model, quantity)
      where deployment_id is null and unit = 'token';
    create index usage_records_unclaimed on usage_records (organization_id, id) where usage_report_id is null and deployment_id is null;
    create index usage_records_report on usage_records (usage_report_id) where usage_report_id is not null;

    -- A month's partition, made once (concurrent callers queue on the advisory lock); rows the
    -- default partition took for that month move into it (inserted into the partition itself, so
    -- the rollup trigger on usage_records does not count them twice). True when it was made.
    create function ensure_usage_records_partition(month date) returns boolean language plpgsql as $fn$
    declare
      first_day date := date_trunc('month', month)::date;
      partition_name text := format('usage_records_%s', to_char(first_day, 'YYYY_MM'));
      lower_bound timestamptz := first_day::timestamp at time zone 'UTC';
      upper_bound timestamptz := (first_day + interval '1 month')::timestamp at time zone 'UTC';
    begin
      perform pg_advisory_xact_lock(hashtext('usage_records_partitions'));
      if to_regclass(partition_name) is not null then return false; end if;
      if exists (select 1 from usage_records_default where created_at >= lower_bound and created_at < upper_bound) then
        execute format('create table %I (like usage_records including defaults including constraints)', partition_name);
        execute format('with moved as (delete from usage_records_default where created_at >= $1 and created_at < $2 returning *) insert into %I select * from moved', partition_name)
          using lower_bound, upper_bound;
        execute format('alter table usage_records attach partition %I for values from (%L) to (%L)', partition_name, lower_bound, upper_bound);
      else
        execute format('create table %I partition of usage_records for values from (%L) to (%L)', partition_name, lower_bound, upper_bound);
      end if;
      return true;
    end $fn$;

    -- The months that have rows, and this month and the next two.
    select ensure_usage_records_partition(month::date)
    from (select distinct date_trunc('month', created_at, 'UTC') as month from usage_records_default
          union select date_trunc('month', now(), 'UTC') + make_interval(months => n) from generate_series(0, 2) n) months
    order by month;

    create function roll_up_usage_records() returns trigger language plpgsql as $fn$
    begin
      insert into usage_rollup_deltas (organization_id, meter, hour, item, quantity)
      select organization_id, 'hosted_tokens', date_trunc('hour', created_at, 'UTC'), model, sum(quantity)
      from new_rows where deployment_id is null and unit = 'token'
      group by 1, 3, 4;
      return null;
    end $fn$;
    create trigger usage_records_rollup after insert on usage_records referencing new table as new_rows
      for each statement execute function roll_up_usage_records();

    -- An interval's seconds go to each hour it overlaps.
    create function roll_up_gpu_usage_intervals() returns trigger language plpgsql as $fn$
    begin
      insert into usage_rollup_deltas (organization_id, meter, hour, item, quantity)
      select i.organization_id, 'gpu_instance_seconds', h.hour, i.service_key,
             sum(extract(epoch from least(i.ended_at, h.hour + interval '1 hour') - greatest(i.started_at, h.hour))::bigint)
      from new_rows i
      cross join lateral generate_series(date_trunc('hour', i.started_at, 'UTC'), i.ended_at - interval '1 second', interval '1 hour') as h (hour)
      group by 1, 3, 4;
      return null;
    end $fn$;
    create trigger gpu_usage_intervals_rollup after insert on gpu_usage_intervals referencing new table as new_rows
      for each statement execute function roll_up_gpu_usage_intervals();
    create index gpu_usage_intervals_span on gpu_usage_intervals using gist (organization_id, tstzrange(started_at, ended_at));

    insert into usage_rollups (organization_id, meter, hour, item, quantity)
    select organization_id, 'hosted_tokens', date_trunc('hour', created_at, 'UTC'), model, sum(quantity)
    from usage_records where deployment_id is null and unit = 'token'
    group by 1, 3, 4;
    insert into usage_rollups (organization_id, meter, hour, item, quantity)
    select i.organization_id, 'gpu_instance_seconds', h.hour, i.service_key,
           sum(extract(epoch from least(i.ended_at, h.hour + interval '1 hour') - greatest(i.started_at, h.hour))::bigint)
    from gpu_usage_intervals i
    cross join lateral generate_series(date_trunc('hour', i.started_at, 'UTC'), i.ended_at - interval '1 second', interval '1 hour') as h (hour)
    group by 1, 3, 4;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop trigger gpu_usage_intervals_rollup on gpu_usage_intervals;
    drop function roll_up_gpu_usage_intervals();
    drop index gpu_usage_intervals_span;
    drop table usage_rollups, usage_rollup_deltas;

    create table usage_records_plain (
      id bigint generated by default as identity primary key,
      request_id text not null,
      organization_id integer not null references organizations (id) on delete cascade,
      deployment_id uuid references deployments (id) on delete set null,
      api_key_id integer references api_keys (id) on delete set null,
      user_id integer references users (id) on delete set null,
      route text not null,
      model text not null,
      prompt_tokens integer not null default 0,
      completion_tokens integer not null default 0,
      total_tokens integer not null default 0,
      created_at timestamptz not null default now(),
      usage_id uuid not null default gen_random_uuid(),
      unit text not null default 'token' check (unit in ('token', 'image', 'request')),
      quantity bigint not null default 0 check (quantity >= 0),
      outcome text not null default 'completed' check (outcome in ('completed', 'aborted')),
      estimated boolean not null default false,
      reported_at timestamptz,
      usage_report_id bigint references usage_reports (id) on delete set null
    );
    insert into usage_records_plain (id, request_id, organization_id, deployment_id, api_key_id, user_id, route, model, prompt_tokens,
      completion_tokens, total_tokens, created_at, usage_id, unit, quantity, outcome, estimated, reported_at, usage_report_id)
    select id, request_id, organization_id, deployment_id, api_key_id, user_id, route, model, prompt_tokens,
      completion_tokens, total_tokens, created_at, usage_id, unit, quantity, outcome, estimated, reported_at, usage_report_id
    from usage_records;
    drop table usage_records;
    drop function roll_up_usage_records();
    drop function ensure_usage_records_partition(date);
    alter table usage_records_plain rename to usage_records;
    alter index usage_records_plain_pkey rename to usage_records_pkey;
    select setval(pg_get_serial_sequence('usage_records', 'id'), coalesce((select max(id) from usage_records), 0) + 1, false);
    alter table usage_records alter column id set generated always;
    alter table usage_records add constraint usage_records_usage_id_key unique (usage_id);
    create index usage_records_request on usage_records (request_id);
    create index usage_records_organization on usage_records (organization_id, created_at);
    create index usage_records_unclaimed on usage_records (organization_id, id) where usage_report_id is null and deployment_id is null;
    create index usage_records_report on usage_records (usage_report_id) where usage_report_id is not null;
  `);
}
