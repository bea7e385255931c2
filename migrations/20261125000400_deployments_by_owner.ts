import type { Knex } from 'knex';

/**
 * The API lists a user's deployments in one organization, newest first (`listDeploymentsOf`:
 * `where user_id = $1 and organization_id = $2 order by created_at desc, id desc limit … offset …`).
 * The index on (user_id, created_at, id) left organization_id to a filter, and Postgres, taking the
 * two columns for independent, expected about one row for the pair: at a million deployments it
 * read all of a user's rows through a bitmap and sorted them for each page, 50,000 rows a page for
 * a tenant with 5 % of the table (test/integration/query-plans.test.ts, docs/scaling.md).
 *
 * - `deployments_by_owner` (user_id, organization_id, created_at desc, id desc) serves every page in
 *   order, and the queries on user_id alone, so it replaces `deployments_by_user`.
 * - Extended statistics tell the planner that a user's organization follows from the user.
 *
 * Built CONCURRENTLY (no lock on writes while it builds), so outside a transaction, one statement
 * at a time; `if not exists` / `if exists` let a migration interrupted half-way run again (an
 * interrupted concurrent build leaves an invalid index, dropped first).
 */
export const config = { transaction: false };

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    do $$ begin
      if exists (select 1 from pg_index i join pg_class c on c.oid = i.indexrelid where c.relname = 'deployments_by_owner' and not i.indisvalid) then
        drop index deployments_by_owner;
      end if;
    end $$`);
  await knex.raw('create index concurrently if not exists deployments_by_owner on deployments (user_id, organization_id, created_at desc, id desc)');
  await knex.raw('drop index concurrently if exists deployments_by_user');
  await knex.raw('create statistics if not exists deployments_owner (dependencies) on user_id, organization_id from deployments');
  await knex.raw('analyze deployments');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop statistics if exists deployments_owner');
  await knex.raw('create index concurrently if not exists deployments_by_user on deployments (user_id, created_at desc, id desc)');
  await knex.raw('drop index concurrently if exists deployments_by_owner');
}
