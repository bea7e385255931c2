import type { Knex } from 'knex';

/**
 * Request metrics per deployment and per API key, one row per owner and minute (docs/operating.md,
 * Deployment metrics).
 *
 * - `deployment_metrics_minutes`, `api_key_metrics_minutes`: what the API processes aggregated in
 *   memory (src/inference/request-metrics.ts), written once a minute in one statement per table:
 *   requests by outcome class, tokens, requests held for a cold start (and their held time), and
 *   two latency sketches (full request, time to first token of a stream). Several processes write
 *   the same minute: the upsert adds counts and merges sketches with `metrics_sketch_merge`, under
 *   the row lock `on conflict` takes, so no process reads and writes back. A deployment's row also
 *   holds its replicas (desired, ready) as the autoscaler sampled them that minute (null: not sampled).
 * - A sketch is a JSON object of bucket index to count (src/metrics/latency-sketch.ts: log buckets
 *   of 1 % relative accuracy from 0.1 ms), null when the minute had no value.
 * - Kept METRICS_RETENTION_DAYS (30) days: a daily job deletes older minutes (the `minute` indexes).
 * - `gpu_usage_intervals (deployment_id, started_at)`: the GPU seconds of one deployment over a range.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create function metrics_sketch_merge(a jsonb, b jsonb) returns jsonb
    language sql immutable parallel safe as $$
      select case
        when a is null then b
        when b is null then a
        else (select jsonb_object_agg(key, total) from (
          select key, sum(value::bigint) as total
          from (select * from jsonb_each_text(a) union all select * from jsonb_each_text(b)) counts
          group by key) merged)
      end
    $$;

    create table deployment_metrics_minutes (
      deployment_id uuid not null references deployments (id) on delete cascade,
      minute timestamptz not null check (extract(second from minute) = 0),
      requests_2xx integer not null default 0,
      requests_4xx integer not null default 0,
      requests_5xx integer not null default 0,
      requests_429 integer not null default 0,
      latency_sketch jsonb,
      ttft_sketch jsonb,
      tokens_in bigint not null default 0,
      tokens_out bigint not null default 0,
      held_requests integer not null default 0,
      held_ms bigint not null default 0,
      replicas_desired integer,
      replicas_ready integer,
      primary key (deployment_id, minute)
    );
    create index deployment_metrics_minutes_minute on deployment_metrics_minutes (minute);

    create table api_key_metrics_minutes (
      api_key_id integer not null references api_keys (id) on delete cascade,
      minute timestamptz not null check (extract(second from minute) = 0),
      requests_2xx integer not null default 0,
      requests_4xx integer not null default 0,
      requests_5xx integer not null default 0,
      requests_429 integer not null default 0,
      latency_sketch jsonb,
      ttft_sketch jsonb,
      tokens_in bigint not null default 0,
      tokens_out bigint not null default 0,
      held_requests integer not null default 0,
      held_ms bigint not null default 0,
      primary key (api_key_id, minute)
    );
    create index api_key_metrics_minutes_minute on api_key_metrics_minutes (minute);

    create index gpu_usage_intervals_deployment on gpu_usage_intervals (deployment_id, started_at);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop index gpu_usage_intervals_deployment;
    drop table api_key_metrics_minutes;
    drop table deployment_metrics_minutes;
    drop function metrics_sketch_merge(jsonb, jsonb);
  `);
}
