import type { Knex } from 'knex';

/**
 * Sessions get a public id (what `GET /v1/user/sessions` shows; the primary key is the token's hash
 * and never leaves the server). Rate limits move to rate-limiter-flexible's Postgres store: its
 * table (`key`, `points`, `expire` in epoch milliseconds) replaces the hand-written counters; keys
 * are text because they hold an email (up to 320 characters) and a client address.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table sessions add column public_id uuid not null default gen_random_uuid();
    create unique index sessions_public_id on sessions (public_id);

    create table rate_limit_points (
      key text primary key,
      points integer not null default 0,
      expire bigint
    );
    create index rate_limit_points_expire on rate_limit_points (expire);

    drop table rate_limits;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    create table rate_limits (
      key text primary key,
      window_started_at timestamptz not null,
      hits integer not null
    );
    drop table rate_limit_points;
    drop index sessions_public_id;
    alter table sessions drop column public_id;
  `);
}
