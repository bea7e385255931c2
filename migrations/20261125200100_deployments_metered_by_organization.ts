import type { Knex } from 'knex';

/**
 * The usage summary adds the seconds of an organization's running deployments not closed yet
 * (`usageTotals`, src/billing/billing.repository.ts); the only index on that condition,
 * `deployments_gpu_metering` (the meter's work list), has no organization, so every summary read
 * every running deployment of the platform (21,000 in `make bench-db`'s shape, 22-29 ms for any
 * organization). This partial index has the organization, under the same condition.
 *
 * Built CONCURRENTLY (writes go on while it builds), so outside a transaction; an interrupted build
 * leaves an invalid index, dropped first when the migration runs again.
 */
export const config = { transaction: false };

const CONDITION = 'running_since is not null and (running_until is null or accrued_until is distinct from running_until)';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    do $$ begin
      if exists (select 1 from pg_index i join pg_class c on c.oid = i.indexrelid where c.relname = 'deployments_metered_by_organization' and not i.indisvalid) then
        drop index deployments_metered_by_organization;
      end if;
    end $$`);
  await knex.raw(`create index concurrently if not exists deployments_metered_by_organization on deployments (organization_id) where ${CONDITION}`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop index concurrently if exists deployments_metered_by_organization');
}
