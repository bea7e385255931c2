import type { Knex } from 'knex';

/**
 * Per-key rate limits and budgets on the inference proxy (src/inference/key-limits.ts):
 *
 * - `api_keys`: a key's own limits, each null when the organization's default applies:
 *   requests and tokens per minute, and a token and spend (USD) budget per calendar month (UTC).
 * - `api_key_limit_defaults`: the organization's defaults, set by its admins.
 * - `api_key_limit_buckets`: what each key has used of each limit, shared by every API process.
 *   `used` leaks at `capacity / 60` per second for a per-minute limit (a bucket that refills
 *   continuously, as OpenAI describes its limits) and never for a monthly budget (one row per month,
 *   named in `dimension`, e.g. `monthly_tokens:2026-11`). Processes take shares of it in batches
 *   (`take_from_api_key_bucket`), so no inference request writes it.
 * - `spending_alerts`: the alerts sent to an organization's admins for a billing period, one per
 *   threshold (50, 80, 100 % of the monthly spending limit), so each goes once per period.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table api_keys
      add column requests_per_minute integer check (requests_per_minute > 0),
      add column tokens_per_minute integer check (tokens_per_minute > 0),
      add column monthly_token_budget bigint check (monthly_token_budget > 0),
      add column monthly_spend_budget numeric(12, 2) check (monthly_spend_budget > 0);

    create table api_key_limit_defaults (
      organization_id integer primary key references organizations (id) on delete cascade,
      requests_per_minute integer check (requests_per_minute > 0),
      tokens_per_minute integer check (tokens_per_minute > 0),
      monthly_token_budget bigint check (monthly_token_budget > 0),
      monthly_spend_budget numeric(12, 2) check (monthly_spend_budget > 0),
      updated_at timestamptz not null default now()
    );

    create table api_key_limit_buckets (
      api_key_id integer not null references api_keys (id) on delete cascade,
      dimension text not null,
      used double precision not null,
      updated_at timestamptz not null,
      primary key (api_key_id, dimension)
    );

    -- Takes up to p_want whole units of what is left of a key's limit after paying p_debt (units
    -- used beyond an earlier share; negative: unused units given back), in one statement and under
    -- the row's lock: what several processes take together never exceeds the capacity.
    create function take_from_api_key_bucket(
      p_key integer, p_dimension text, p_capacity double precision, p_leak_per_second double precision,
      p_want double precision, p_debt double precision
    ) returns table (granted double precision, remaining double precision) language plpgsql as $$
    declare
      v_used double precision;
      v_now timestamptz;
    begin
      insert into api_key_limit_buckets (api_key_id, dimension, used, updated_at)
        values (p_key, p_dimension, 0, clock_timestamp())
        on conflict (api_key_id, dimension) do nothing;
      select b.used, b.updated_at into v_used, v_now from api_key_limit_buckets b
        where b.api_key_id = p_key and b.dimension = p_dimension for update;
      v_used := greatest(0, v_used - p_leak_per_second * greatest(0, extract(epoch from clock_timestamp() - v_now))) + p_debt;
      v_used := greatest(v_used, 0);
      granted := least(p_want, greatest(0, floor(p_capacity - v_used)));
      v_used := v_used + granted;
      remaining := p_capacity - v_used;
      update api_key_limit_buckets set used = v_used, updated_at = clock_timestamp()
        where api_key_id = p_key and dimension = p_dimension;
      return next;
    end $$;

    create table spending_alerts (
      organization_id integer not null references organizations (id) on delete cascade,
      period_start timestamptz not null,
      threshold_percent smallint not null check (threshold_percent in (50, 80, 100)),
      spent numeric not null,
      spending_limit numeric(12, 2) not null,
      sent_at timestamptz not null default now(),
      primary key (organization_id, period_start, threshold_percent)
    );
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop table spending_alerts;
    drop function take_from_api_key_bucket;
    drop table api_key_limit_buckets;
    drop table api_key_limit_defaults;
    alter table api_keys drop column requests_per_minute, drop column tokens_per_minute,
      drop column monthly_token_budget, drop column monthly_spend_budget;
  `);
}
