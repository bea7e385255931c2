import type { Knex } from 'knex';

/**
 * One GPU ledger per physical cluster (issue #31): hosted models book GPUs in `gpu_allocations`
 * as dedicated deployments do, so a cluster registered twice (dedicated and `--hosted`, as `make
 * run` once did with its simulator) never offers a GPU a hosted model holds.
 *
 * - An allocation is either a deployment's or a hosted model launch's (`hosted_model_endpoint_id`),
 *   never both; at most one active allocation per launch, as per deployment.
 * - `hosted_model_endpoints.instance_id`: the instance (engine worker) the launch was placed on.
 *
 * Registrations with the same endpoint are one physical cluster: the GPUs used on an engine worker
 * are those booked through any of them (src/clusters/gpu-ledger.ts).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table gpu_allocations
      alter column deployment_id drop not null,
      add column hosted_model_endpoint_id uuid references hosted_model_endpoints (id) on delete cascade,
      add constraint gpu_allocations_one_holder check ((deployment_id is null) <> (hosted_model_endpoint_id is null));
    create unique index gpu_allocations_one_active_per_hosted_endpoint on gpu_allocations (hosted_model_endpoint_id)
      where status = 'active' and hosted_model_endpoint_id is not null;
    alter table hosted_model_endpoints add column instance_id uuid references instances (id) on delete set null;
    create index instances_by_worker on instances (engine_worker);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop index instances_by_worker;
    alter table hosted_model_endpoints drop column instance_id;
    delete from gpu_allocations where hosted_model_endpoint_id is not null;
    alter table gpu_allocations
      drop constraint gpu_allocations_one_holder,
      drop column hosted_model_endpoint_id,
      alter column deployment_id set not null;
  `);
}
