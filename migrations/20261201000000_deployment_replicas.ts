import type { Knex } from 'knex';

/**
 * Replicas as rows (issue #36, docs/decisions/2026-11-29-elastic-deployments.md, part 1): a
 * deployment serves through its replicas, each an engine model of its own on GPUs of its own.
 * Every existing deployment is a one-replica deployment; nothing the API shows changes.
 *
 * - `deployment_replicas`: the deployment's replica `ordinal` (0 is the model launched today,
 *   `dep-<id>`; replica k > 0 will be `dep-<id>-r<k>`), its engine model uid, its GPU allocation in
 *   the ledger (kept once released, as the deployment's is: the allocation's own status says so),
 *   its status (`starting | ready | draining | stopping | stopped | failed`,
 *   src/deployments/deployment-states.ts) and times, and its organization (the deployment's, which
 *   never changes: the usage summary reads an organization's replicas by index).
 * - The GPU seconds bookkeeping moves from the deployment to each replica: `running_since` and
 *   `running_until` (the whole seconds it entered and left `ready`), `accrued_until` (how far its
 *   seconds are closed) and `gpu_service_key` (the price row of its GPUs). The meter's work list and
 *   the summary's index move with them. The deployment keeps its placement columns (cluster,
 *   instance, allocation, engine uid: replica 0's), which the API shows and its list routes read
 *   from the deployment's row alone.
 * - `gpu_usage_intervals.replica_id`: an interval is one replica's; a replica's intervals never
 *   overlap nor start twice at the same second (the constraints were the deployment's). The usage
 *   totals aggregate by organization and service key, as before.
 * - `deployment_gpu_services`: one row per replica (its allocation's service), with `replica_id`.
 * - The ledger's one active allocation per deployment stays while a deployment has one replica
 *   holding GPUs; the part that adds replicas replaces it with one per replica.
 *
 * The backfill writes replica 0 of every deployment that was placed (it has an allocation), with a
 * status from the deployment's: running → ready; provisioning, starting → starting; terminating →
 * stopping; terminated → stopped; failed → failed while it still holds its GPUs (its cleanup is
 * due), else stopped. Its intervals become replica 0's.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table deployment_replicas (
      id uuid primary key default gen_random_uuid(),
      deployment_id uuid not null references deployments (id),
      organization_id integer not null references organizations (id),
      ordinal integer not null check (ordinal >= 0),
      engine_model_uid text not null unique,
      gpu_allocation_id uuid not null unique references gpu_allocations (id),
      status text not null default 'starting' check (status in ('starting', 'ready', 'draining', 'stopping', 'stopped', 'failed')),
      created_at timestamptz not null default now(),
      ready_at timestamptz,
      stopped_at timestamptz,
      running_since timestamptz,
      running_until timestamptz,
      accrued_until timestamptz,
      gpu_service_key text references prices (service_key),
      unique (deployment_id, ordinal),
      check ((status = 'stopped') = (stopped_at is not null))
    );
    -- The meter's work list (replicas whose GPU seconds are still to be closed, by deployment: an
    -- accrual closes a deployment's replicas together), and the usage summary's (by organization).
    create index deployment_replicas_gpu_metering on deployment_replicas (deployment_id)
      where running_since is not null and (running_until is null or accrued_until is distinct from running_until);
    create index deployment_replicas_metered_by_organization on deployment_replicas (organization_id)
      where running_since is not null and (running_until is null or accrued_until is distinct from running_until);

    insert into deployment_replicas (deployment_id, organization_id, ordinal, engine_model_uid, gpu_allocation_id, status, created_at,
                                     ready_at, stopped_at, running_since, running_until, accrued_until, gpu_service_key)
    select d.id, d.organization_id, 0, coalesce(d.engine_model_uid, 'dep-' || replace(d.id::text, '-', '')), a.id, r.status, a.created_at,
           d.running_since, case when r.status = 'stopped' then coalesce(a.released_at, d.terminated_at, d.status_changed_at) end,
           d.running_since, d.running_until, d.accrued_until, d.gpu_service_key
    from deployments d
    join gpu_allocations a on a.id = d.gpu_allocation_id
    cross join lateral (select case
      when d.status = 'running' then 'ready'
      when d.status = 'terminating' then 'stopping'
      when d.status = 'terminated' then 'stopped'
      when d.status = 'failed' then case when a.status = 'active' then 'failed' else 'stopped' end
      else 'starting' end as status) r;

    alter table gpu_usage_intervals add column replica_id uuid references deployment_replicas (id);
    update gpu_usage_intervals i set replica_id = r.id from deployment_replicas r where r.deployment_id = i.deployment_id and r.ordinal = 0;
    alter table gpu_usage_intervals
      alter column replica_id set not null,
      drop constraint gpu_usage_intervals_deployment_id_started_at_key,
      drop constraint gpu_usage_intervals_deployment_id_tstzrange_excl,
      add constraint gpu_usage_intervals_replica_started unique (replica_id, started_at),
      add constraint gpu_usage_intervals_replica_no_overlap exclude using gist (replica_id with =, tstzrange(started_at, ended_at) with &&);

    create or replace view deployment_gpu_services as
      select r.deployment_id, r.organization_id, s.*, p.service_key, r.id as replica_id
      from deployment_replicas r
      join gpu_allocations a on a.id = r.gpu_allocation_id
      join gpu_services s on s.instance_id = a.instance_id and s.gpu_count = a.gpu_count
      left join prices p on (p.provider, p.region, p.resource_kind, p.instance_type, p.gpu_type, p.gpu_count)
        = (s.provider, s.region, s.resource_kind, s.instance_type, s.gpu_type, s.gpu_count_text);

    -- Closing GPU seconds no longer writes the deployment's row: every update of it is a change.
    drop trigger deployments_updated_at on deployments;
    create trigger deployments_updated_at before update on deployments for each row execute function set_updated_at();
    alter table deployments drop column running_since, drop column running_until, drop column accrued_until, drop column gpu_service_key;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table deployments
      add column running_since timestamptz,
      add column running_until timestamptz,
      add column accrued_until timestamptz,
      add column gpu_service_key text references prices (service_key);
    update deployments d set running_since = r.running_since, running_until = r.running_until, accrued_until = r.accrued_until, gpu_service_key = r.gpu_service_key
    from deployment_replicas r where r.deployment_id = d.id and r.ordinal = 0;
    drop trigger deployments_updated_at on deployments;
    create trigger deployments_updated_at before update on deployments for each row
      when (new.accrued_until is not distinct from old.accrued_until and new.gpu_service_key is not distinct from old.gpu_service_key)
      execute function set_updated_at();
    create index deployments_gpu_metering on deployments (id)
      where running_since is not null and (running_until is null or accrued_until is distinct from running_until);
    create index deployments_metered_by_organization on deployments (organization_id)
      where running_since is not null and (running_until is null or accrued_until is distinct from running_until);

    drop view deployment_gpu_services;
    create view deployment_gpu_services as
      select d.id as deployment_id, d.organization_id, s.*, p.service_key
      from deployments d
      join gpu_allocations a on a.id = d.gpu_allocation_id
      join gpu_services s on s.instance_id = a.instance_id and s.gpu_count = a.gpu_count
      left join prices p on (p.provider, p.region, p.resource_kind, p.instance_type, p.gpu_type, p.gpu_count)
        = (s.provider, s.region, s.resource_kind, s.instance_type, s.gpu_type, s.gpu_count_text);

    alter table gpu_usage_intervals
      drop constraint gpu_usage_intervals_replica_started,
      drop constraint gpu_usage_intervals_replica_no_overlap,
      add constraint gpu_usage_intervals_deployment_id_started_at_key unique (deployment_id, started_at),
      add constraint gpu_usage_intervals_deployment_id_tstzrange_excl exclude using gist (deployment_id with =, tstzrange(started_at, ended_at) with &&),
      drop column replica_id;
    drop table deployment_replicas;
  `);
}
