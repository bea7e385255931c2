import type { Knex } from 'knex';

/**
 * Three read routes ask for an organization's deployments that are not terminated: the API keys'
 * deployment options (`scopableDeployments`, newest first), and `GET /v1/models` and inference
 * routing (`findRoutingCandidates`, the whole organization for an API key, the user's own for a
 * session). No index led with `organization_id` for them (`deployments_active_by_organization`
 * leaves out `failed`), so each was a sequential scan of the table: 140 to 190 ms at a million
 * deployments for an organization with 200,000 (docs/scaling.md).
 *
 * `deployments_live_by_organization` (organization_id, created_at desc, id desc) holds only the rows
 * that are not terminated, the few a long history keeps live, and reads them in the routes' order.
 * The queries name the predicate as a literal (`status <> 'terminated'`), so the planner matches
 * the partial index whatever the plan's parameters.
 *
 * Built CONCURRENTLY (no lock on writes while it builds), so outside a transaction; an interrupted
 * build leaves an invalid index, dropped first when the migration runs again.
 */
export const config = { transaction: false };

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    do $$ begin
      if exists (select 1 from pg_index i join pg_class c on c.oid = i.indexrelid where c.relname = 'deployments_live_by_organization' and not i.indisvalid) then
        drop index deployments_live_by_organization;
      end if;
    end $$`);
  await knex.raw(
    "create index concurrently if not exists deployments_live_by_organization on deployments (organization_id, created_at desc, id desc) where status <> 'terminated'",
  );
  await knex.raw('analyze deployments');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop index concurrently if exists deployments_live_by_organization');
}
