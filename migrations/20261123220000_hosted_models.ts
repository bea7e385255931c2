import type { Knex } from 'knex';

/**
 * Hosted models (DESIGN.md §3 Inference routing): the catalog's `hosted` models, launched by the
 * operator on the platform's hosted clusters and called by their model name.
 *
 * - `hosted_model_endpoints`: one launch of a hosted model on a hosted cluster, under the engine
 *   model uid the launch gave it; it serves while `running`.
 * - `api_keys.allow_hosted_models`: an API key reaches hosted models only when this is on (default
 *   off: a key reaches only its scoped deployments).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table hosted_model_endpoints (
      id uuid primary key default gen_random_uuid(),
      model_name text not null references deployable_models (model_name) on delete cascade,
      cluster_id uuid not null references clusters (id) on delete cascade,
      engine_model_uid text not null,
      state text not null check (state in ('launching', 'running', 'failed')),
      state_reason text,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      unique (cluster_id, model_name),
      unique (cluster_id, engine_model_uid)
    );
    create trigger hosted_model_endpoints_updated_at before update on hosted_model_endpoints for each row execute function set_updated_at();

    alter table api_keys add column allow_hosted_models boolean not null default false;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table api_keys drop column allow_hosted_models;
    drop table hosted_model_endpoints;
  `);
}
