import type { Knex } from 'knex';

/**
 * API keys (only the SHA-256 of the secret is stored) with their deployment scopes, and the usage
 * of inference requests, written in batches and once per request id.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table api_keys (
      id integer generated always as identity primary key,
      organization_id integer not null references organizations (id) on delete cascade,
      created_by_user_id integer references users (id) on delete set null,
      name text not null check (length(name) between 1 and 255),
      key_prefix text not null,
      key_hash text not null unique,
      status text not null default 'active' check (status in ('active', 'disabled', 'revoked')),
      expires_at timestamptz,
      last_used_at timestamptz,
      revoked_at timestamptz,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );
    create index api_keys_organization on api_keys (organization_id, created_at desc);
    create trigger api_keys_updated_at before update on api_keys for each row execute function set_updated_at();

    create table api_key_deployments (
      api_key_id integer not null references api_keys (id) on delete cascade,
      deployment_id uuid not null references deployments (id) on delete cascade,
      primary key (api_key_id, deployment_id)
    );
    create index api_key_deployments_deployment on api_key_deployments (deployment_id);

    create table usage_records (
      id bigint generated always as identity primary key,
      request_id text not null unique,
      organization_id integer not null references organizations (id) on delete cascade,
      deployment_id uuid references deployments (id) on delete set null,
      api_key_id integer references api_keys (id) on delete set null,
      user_id integer references users (id) on delete set null,
      route text not null,
      model text not null,
      prompt_tokens integer not null default 0,
      completion_tokens integer not null default 0,
      total_tokens integer not null default 0,
      created_at timestamptz not null default now()
    );
    create index usage_records_organization on usage_records (organization_id, created_at);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop table usage_records, api_key_deployments, api_keys');
}
