import type { Knex } from 'knex';

/**
 * Elastic deployments (docs/decisions/2026-11-29-elastic-deployments.md, parts 2 to 6).
 *
 * - `deployments`: the owner's scaling settings (`min_replicas`, `max_replicas`,
 *   `target_concurrency`, `scale_to_zero_after_seconds`), the instance type asked for at creation
 *   (`instance_type`, null: the platform chooses), and the number of replicas the autoscaler wants
 *   now (`desired_replicas`). Defaults keep what every deployment was: one fixed replica.
 * - No new status: a deployment scaled to zero is `running` with `desired_replicas` 0 and no replica
 *   (the released document's status enum is closed; see the decision's "Scale to zero is a count").
 * - `deployment_replicas.draining_since`: when a replica stopped taking new requests.
 * - `deployment_events`: the type `deployment.scaled` and its `scale` (from, to, reason).
 * - `deployment_load` (unlogged: it is a few seconds of gauges, rebuilt by the API processes once a
 *   second): each API process's requests in flight and held, by deployment, and on each replica.
 * - `deployment_autoscaling`: the autoscaler's memory of a deployment (last request, since when the
 *   load has wanted fewer replicas, a capacity shortfall already reported).
 * - The ledger's one active allocation per deployment becomes one per replica (each replica's
 *   `gpu_allocation_id` is unique already).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table deployments
      add column min_replicas integer not null default 1 check (min_replicas between 0 and 64),
      add column max_replicas integer not null default 1 check (max_replicas between 1 and 64),
      add column target_concurrency integer not null default 4 check (target_concurrency between 1 and 1024),
      add column scale_to_zero_after_seconds integer not null default 900 check (scale_to_zero_after_seconds between 1 and 604800),
      add column instance_type text,
      add column desired_replicas integer not null default 1 check (desired_replicas between 0 and 64),
      add constraint deployments_replica_bounds check (max_replicas >= min_replicas);

    alter table deployment_replicas add column draining_since timestamptz;

    alter table deployment_events
      drop constraint deployment_events_type_check,
      add constraint deployment_events_type_check check (type in ('deployment.status_changed', 'deployment.provisioning_step', 'deployment.scaled')),
      add column scale jsonb;

    create unlogged table deployment_load (
      deployment_id uuid not null references deployments (id) on delete cascade,
      process_id text not null,
      in_flight integer not null,
      held integer not null,
      replicas jsonb not null default '{}',
      last_request_at timestamptz,
      reported_at timestamptz not null default now(),
      primary key (deployment_id, process_id)
    );

    create table deployment_autoscaling (
      deployment_id uuid primary key references deployments (id) on delete cascade,
      last_request_at timestamptz,
      fewer_wanted_since timestamptz,
      shortfall_reported_at timestamptz
    );

    drop index gpu_allocations_one_active;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    create unique index gpu_allocations_one_active on gpu_allocations (deployment_id) where status = 'active';
    drop table deployment_autoscaling;
    drop table deployment_load;
    delete from deployment_events where type = 'deployment.scaled';
    alter table deployment_events
      drop column scale,
      drop constraint deployment_events_type_check,
      add constraint deployment_events_type_check check (type in ('deployment.status_changed', 'deployment.provisioning_step'));
    alter table deployment_replicas drop column draining_since;
    alter table deployments
      drop constraint deployments_replica_bounds,
      drop column min_replicas,
      drop column max_replicas,
      drop column target_concurrency,
      drop column scale_to_zero_after_seconds,
      drop column instance_type,
      drop column desired_replicas;
  `);
}
