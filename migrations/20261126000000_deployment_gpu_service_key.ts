import type { Knex } from 'knex';

/**
 * The usage summary counts the seconds of an organization's running deployments not closed yet, each
 * priced by its GPU service (`usageTotals`, src/billing/billing.repository.ts). That service came
 * from `deployment_gpu_services` for each deployment: six index lookups and a series of GPU counts
 * per deployment, 800 times for an organization with 800 running (most of the summary's 18 ms in
 * `make bench-db`).
 *
 * `deployments.gpu_service_key`: the price row's key of the deployment's GPUs, written when it
 * enters `running`, or by the GPU meter's first accrual when the service had no price row then (the
 * meter makes one at the list price). A deployment's allocation is made once, before it runs, so the
 * key never goes stale. The view costs the planner too: 6 to 9 ms to plan the summary with it.
 *
 * Like `accrued_until`, it is bookkeeping, not a change of the deployment: writing it leaves
 * `updated_at` alone. The column is added with its reference NOT VALID and validated afterwards (a
 * scan that does not hold writes); the backfill touches only the deployments the meter still has
 * work for.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table deployments add column gpu_service_key text;
    alter table deployments add constraint deployments_gpu_service_key_fkey
      foreign key (gpu_service_key) references prices (service_key) not valid;
    alter table deployments validate constraint deployments_gpu_service_key_fkey;
    drop trigger deployments_updated_at on deployments;
    create trigger deployments_updated_at before update on deployments for each row
      when (new.accrued_until is not distinct from old.accrued_until and new.gpu_service_key is not distinct from old.gpu_service_key)
      execute function set_updated_at();
    update deployments d set gpu_service_key = s.service_key
    from deployment_gpu_services s
    where s.deployment_id = d.id and s.service_key is not null
      and d.running_since is not null and (d.running_until is null or d.accrued_until is distinct from d.running_until);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop trigger deployments_updated_at on deployments;
    alter table deployments drop column gpu_service_key;
    create trigger deployments_updated_at before update on deployments for each row
      when (new.accrued_until is not distinct from old.accrued_until) execute function set_updated_at();
  `);
}
