import type { Knex } from 'knex';

/**
 * Deployment events and organization webhooks (src/events/, src/webhooks/):
 *
 * - `deployment_events`: the log of every status change of a deployment and of its provisioning
 *   steps, appended in the transaction of the change (src/events/events.repository.ts). Its id is
 *   the SSE `id:`; per deployment, ids commit in increasing order because every append holds the
 *   deployment's row lock. Existing deployments get one event with their current status, so every
 *   deployment's history starts with where it is.
 * - `webhook_endpoints`: an organization's receivers. The signing secret is sealed with the server
 *   key (`sealed_secret`); after a rotation the previous one still signs (a second signature) until
 *   `previous_secret_expires_at`.
 * - `webhook_deliveries`: one message per endpoint and event (its id is the `webhook-id`), written
 *   with the event; `queued_at` is set once its pg-boss job exists (the dispatcher queues the rest).
 * - `webhook_delivery_attempts`: each attempt, with the receiver's status code or the error and
 *   how long it took.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table deployment_events (
      id bigint generated always as identity primary key,
      deployment_id uuid not null references deployments (id) on delete cascade,
      organization_id integer not null references organizations (id) on delete cascade,
      type text not null check (type in ('deployment.status_changed', 'deployment.provisioning_step')),
      from_status text,
      to_status text not null,
      step text,
      progress real check (progress between 0 and 1),
      failure_stage text,
      message text,
      created_at timestamptz not null default now()
    );
    create index deployment_events_of_deployment on deployment_events (deployment_id, id);

    insert into deployment_events (deployment_id, organization_id, type, from_status, to_status, failure_stage, message, created_at)
    select id, organization_id, 'deployment.status_changed', null, status, failure_stage,
           case when status = 'failed' then failure_reason when status = 'provisioning' then selection_reason end,
           status_changed_at
      from deployments
     order by status_changed_at, id;

    create table webhook_endpoints (
      id uuid primary key default gen_random_uuid(),
      organization_id integer not null references organizations (id) on delete cascade,
      url text not null,
      description text,
      event_types text[],
      status text not null default 'enabled' check (status in ('enabled', 'disabled')),
      disabled_reason text,
      disabled_at timestamptz,
      sealed_secret text not null,
      previous_sealed_secret text,
      previous_secret_expires_at timestamptz,
      consecutive_failures integer not null default 0 check (consecutive_failures >= 0),
      created_by_user_id integer references users (id) on delete set null,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );
    create index webhook_endpoints_of_organization on webhook_endpoints (organization_id, created_at);
    create trigger webhook_endpoints_updated_at before update on webhook_endpoints
      for each row execute function set_updated_at();

    create table webhook_deliveries (
      id uuid primary key default gen_random_uuid(),
      endpoint_id uuid not null references webhook_endpoints (id) on delete cascade,
      event_id bigint references deployment_events (id) on delete cascade,
      event_type text not null,
      status text not null default 'pending' check (status in ('pending', 'succeeded', 'failed')),
      attempts integer not null default 0,
      last_error text,
      queued_at timestamptz,
      created_at timestamptz not null default now(),
      completed_at timestamptz
    );
    create index webhook_deliveries_to_queue on webhook_deliveries (created_at) where queued_at is null;
    create index webhook_deliveries_of_endpoint on webhook_deliveries (endpoint_id, created_at);
    create index webhook_deliveries_of_event on webhook_deliveries (event_id) where event_id is not null;

    create table webhook_delivery_attempts (
      id bigint generated always as identity primary key,
      delivery_id uuid not null references webhook_deliveries (id) on delete cascade,
      endpoint_id uuid not null references webhook_endpoints (id) on delete cascade,
      attempt integer not null check (attempt >= 1),
      outcome text not null check (outcome in ('succeeded', 'failed')),
      response_status integer,
      error text,
      duration_ms integer not null check (duration_ms >= 0),
      created_at timestamptz not null default now()
    );
    create index webhook_delivery_attempts_of_endpoint on webhook_delivery_attempts (endpoint_id, id desc);
    create index webhook_delivery_attempts_of_delivery on webhook_delivery_attempts (delivery_id);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop table webhook_delivery_attempts;
    drop table webhook_deliveries;
    drop table webhook_endpoints;
    drop table deployment_events;
  `);
}
