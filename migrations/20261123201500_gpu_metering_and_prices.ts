import type { Knex } from 'knex';

/**
 * Metering of GPU seconds and the price table (see docs/billing.md, Metering and prices).
 *
 * - `prices`: one row per `service_key` (`provider:region:resource_kind:instance_type:gpu_type:gpu_count`,
 *   the interface's descriptor). The key, the meter, the unit and the display name are generated from
 *   the six dimension columns, so they can never disagree with them. `gpu_instance` rows bill GPU
 *   seconds of `gpu_count` GPUs of an instance type in a cluster's provider and region; `hosted_model`
 *   rows bill tokens of a hosted model, its name in the `instance_type` segment
 *   (`platform::hosted_model:qwen2.5-instruct::`): the model is what a hosted service is an instance of.
 *   Seeded with each instance type's list price (its share for 1, 2, 4 or 8 of its GPUs) in the
 *   region the price was read for, with each existing cluster's instances, and with a per-token price
 *   of each hosted catalog model (an assumption, see docs/billing.md).
 * - `gpu_services`: what every instance sells, for each GPU count, and its list price: the one place
 *   that says how a cluster and an instance type make a service's dimensions; `deployment_gpu_services`
 *   gives a placed deployment's (by its GPU allocation) with its price row's key.
 * - `deployments.running_since` / `running_until`: the whole seconds a deployment entered and left
 *   `running`, written with the status change; `accrued_until`: how far its GPU seconds are closed.
 * - `gpu_usage_intervals`: closed `[started_at, ended_at)` intervals of whole seconds. A deployment's
 *   intervals never overlap (exclusion constraint) and never start twice at the same second (unique),
 *   so a duplicated or concurrent accrual is refused by the data, not only by the job's care.
 *   `report_id` / `reported_at` are for the job that reports them to the payment processor.
 * - `usage_anomalies`: usage flagged for review (a report the processor refused, a quantity out of
 *   range) until resolved; the usage summary's `open_anomalies` counts them.
 */

/** Where the list prices of instance types (migration 20261121000500) were read. */
const PRICE_REGIONS: Record<string, string> = { aws: 'us-east-1', gcp: 'us-central1' };

/**
 * USD per token of the hosted catalog models: an assumption, not a published price of ours. Order of
 * magnitude of public serverless list prices for models of the size a shared cluster would serve
 * (docs/billing.md, Metering and prices); operators set the real ones with `prices set`.
 */
const HOSTED_TOKEN_PRICES: Record<string, string> = {
  'qwen2.5-instruct': '0.00000030',
  'llama-3.1-instruct': '0.00000018',
  'bge-m3': '0.00000002',
  'bge-reranker-v2-m3': '0.00000002',
};

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create extension if not exists btree_gist;

    create table prices (
      id integer generated always as identity primary key,
      provider text not null,
      region text not null,
      resource_kind text not null check (resource_kind in ('gpu_instance', 'hosted_model')),
      instance_type text not null,
      gpu_type text not null,
      gpu_count text not null,
      service_key text not null unique generated always as
        (provider || ':' || region || ':' || resource_kind || ':' || instance_type || ':' || gpu_type || ':' || gpu_count) stored,
      meter text not null generated always as
        (case resource_kind when 'gpu_instance' then 'gpu_instance_seconds' else 'hosted_tokens' end) stored,
      unit text not null generated always as (case resource_kind when 'gpu_instance' then 'second' else 'token' end) stored,
      display_name text not null generated always as
        (case resource_kind
           when 'gpu_instance' then 'GPU instance ' || instance_type || ' (' || gpu_count || ' x ' || upper(gpu_type) || '), ' || region
           else 'Hosted model ' || instance_type end) stored,
      -- USD (major units) per unit; 12 decimals hold an instance's price per second shared by 8 GPUs exactly.
      unit_amount_decimal numeric(20, 12) not null check (unit_amount_decimal >= 0),
      currency text not null default 'usd' check (currency ~ '^[a-z]{3}$'),
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      check ((provider || region || resource_kind || instance_type || gpu_type || gpu_count) !~ ':'),
      check (
        (resource_kind = 'gpu_instance' and provider <> '' and region <> '' and instance_type <> '' and gpu_type <> ''
          and gpu_type = lower(gpu_type) and gpu_count ~ '^[1-9][0-9]{0,2}$')
        or (resource_kind = 'hosted_model' and provider <> '' and instance_type <> '' and gpu_type = '' and gpu_count = '')
      )
    );
    create trigger prices_updated_at before update on prices for each row execute function set_updated_at();
    -- Hosted tokens are priced per model: one price a model, or its tokens would be counted twice.
    create unique index prices_one_per_hosted_model on prices (instance_type) where resource_kind = 'hosted_model';

    create view gpu_services as
      select i.id as instance_id, i.cluster_id, n.gpu_count, c.provider, c.region, 'gpu_instance'::text as resource_kind,
             t.name as instance_type, lower(t.gpu_type) as gpu_type, n.gpu_count::text as gpu_count_text,
             round(t.price_per_second * n.gpu_count / t.gpu_count, 12) as list_unit_amount, t.currency
      from instances i
      join instance_types t on t.id = i.instance_type_id
      join clusters c on c.id = i.cluster_id
      cross join lateral generate_series(1, t.gpu_count) as n (gpu_count);

    -- Each placed deployment's GPU service (its allocation's instance and GPU count), with the price
    -- row of that service when there is one (service_key null otherwise).
    create view deployment_gpu_services as
      select d.id as deployment_id, d.organization_id, s.*, p.service_key
      from deployments d
      join gpu_allocations a on a.id = d.gpu_allocation_id
      join gpu_services s on s.instance_id = a.instance_id and s.gpu_count = a.gpu_count
      left join prices p on (p.provider, p.region, p.resource_kind, p.instance_type, p.gpu_type, p.gpu_count)
        = (s.provider, s.region, s.resource_kind, s.instance_type, s.gpu_type, s.gpu_count_text);

    alter table deployments
      add column running_since timestamptz,
      add column running_until timestamptz,
      add column accrued_until timestamptz;
    update deployments set running_since = date_trunc('second', status_changed_at) where status = 'running';
    -- Closing GPU seconds (every minute while it runs) is bookkeeping, not a change of the deployment:
    -- its updated_at stays.
    drop trigger deployments_updated_at on deployments;
    create trigger deployments_updated_at before update on deployments for each row
      when (new.accrued_until is not distinct from old.accrued_until) execute function set_updated_at();
    -- Deployments whose GPU seconds are still to be closed: the accrual job's work list.
    create index deployments_gpu_metering on deployments (id)
      where running_since is not null and (running_until is null or accrued_until is distinct from running_until);

    create table gpu_usage_intervals (
      id bigint generated always as identity primary key,
      deployment_id uuid not null references deployments (id),
      organization_id integer not null references organizations (id) on delete cascade,
      service_key text not null references prices (service_key),
      started_at timestamptz not null,
      ended_at timestamptz not null,
      quantity bigint not null generated always as (extract(epoch from ended_at - started_at)::bigint) stored,
      report_id text unique,
      reported_at timestamptz,
      created_at timestamptz not null default now(),
      check (ended_at > started_at),
      check (extract(epoch from started_at) = trunc(extract(epoch from started_at))
        and extract(epoch from ended_at) = trunc(extract(epoch from ended_at))),
      unique (deployment_id, started_at),
      exclude using gist (deployment_id with =, tstzrange(started_at, ended_at) with &&)
    );
    create index gpu_usage_intervals_organization on gpu_usage_intervals (organization_id, ended_at);
    create index gpu_usage_intervals_unreported on gpu_usage_intervals (id) where reported_at is null;

    create table usage_anomalies (
      id bigint generated always as identity primary key,
      organization_id integer not null references organizations (id) on delete cascade,
      meter text not null check (meter in ('gpu_instance_seconds', 'hosted_tokens')),
      service_key text references prices (service_key),
      kind text not null check (kind in ('report_failed', 'out_of_range')),
      detail text not null,
      -- When the flagged usage happened: the billing period it belongs to.
      usage_at timestamptz not null,
      gpu_usage_interval_id bigint unique references gpu_usage_intervals (id) on delete cascade,
      opened_at timestamptz not null default now(),
      resolved_at timestamptz
    );
    create index usage_anomalies_open on usage_anomalies (organization_id, usage_at) where resolved_at is null;
  `);

  const types = await knex('instance_types').select('name', 'provider', 'gpu_type', 'gpu_count', 'price_per_second', 'currency');
  const listed = types.flatMap((type) =>
    PRICE_REGIONS[type.provider]
      ? [1, 2, 4, 8]
          .filter((count) => count <= type.gpu_count)
          .map((count) => ({
            provider: type.provider,
            region: PRICE_REGIONS[type.provider],
            resource_kind: 'gpu_instance',
            instance_type: type.name,
            gpu_type: type.gpu_type.toLowerCase(),
            gpu_count: String(count),
            unit_amount_decimal: knex.raw('round(?::numeric * ? / ?, 12)', [type.price_per_second, count, type.gpu_count]),
            currency: type.currency,
          }))
      : [],
  );
  if (listed.length) await knex('prices').insert(listed).onConflict('service_key').ignore();
  await knex.raw(`
    insert into prices (provider, region, resource_kind, instance_type, gpu_type, gpu_count, unit_amount_decimal, currency)
    select provider, region, resource_kind, instance_type, gpu_type, gpu_count_text, list_unit_amount, currency
    from gpu_services where gpu_count in (1, 2, 4, 8)
    on conflict (service_key) do nothing
  `);
  const hosted = await knex('deployable_models').where({ hosted: true }).pluck('model_name');
  const priced = hosted.filter((name: string) => HOSTED_TOKEN_PRICES[name]);
  if (priced.length) {
    await knex('prices').insert(
      priced.map((name: string) => ({
        provider: 'platform',
        region: '',
        resource_kind: 'hosted_model',
        instance_type: name,
        gpu_type: '',
        gpu_count: '',
        unit_amount_decimal: HOSTED_TOKEN_PRICES[name],
      })),
    );
  }
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop table usage_anomalies, gpu_usage_intervals;
    drop index deployments_gpu_metering;
    drop trigger deployments_updated_at on deployments;
    create trigger deployments_updated_at before update on deployments for each row execute function set_updated_at();
    alter table deployments drop column running_since, drop column running_until, drop column accrued_until;
    drop view deployment_gpu_services, gpu_services;
    drop table prices;
  `);
}
