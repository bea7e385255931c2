import type { Knex } from 'knex';

/**
 * `deployment_counts_move` (migration `20261125100000_deployment_counts`) found the rows whose owner
 * changed by joining the statement's old rows to its new ones by id. PL/pgSQL plans a trigger's
 * statement once per session and keeps a generic plan after five runs; planned for the one-row
 * updates that are most updates of `deployments` (status changes, metering), the join is a nested
 * loop, and it stays one for a later update of thousands of rows in that session: moving 8,219
 * deployments to another owner (`transferDeployments`, on a pooled connection that had run 20
 * one-row updates) took 15.7 s in this trigger, 67 million comparisons. Its time grows with the
 * square of the rows moved.
 *
 * The count needs no join: per (user, organization), -1 for each old row and +1 for each new one,
 * written only where the sum is not 0 (an update that moves no row to another owner writes
 * nothing, as before). One aggregate of both transition tables whatever the plan.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create or replace function deployment_counts_move() returns trigger language plpgsql as $$
    begin
      insert into deployment_counts (user_id, organization_id, deployments)
        select user_id, organization_id, sum(delta) from (
          select user_id, organization_id, -1 as delta from removed
          union all
          select user_id, organization_id, 1 from added
        ) moves
        group by user_id, organization_id having sum(delta) <> 0 order by user_id, organization_id
        on conflict (user_id, organization_id) do update set deployments = deployment_counts.deployments + excluded.deployments;
      return null;
    end $$;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    create or replace function deployment_counts_move() returns trigger language plpgsql as $$
    begin
      insert into deployment_counts (user_id, organization_id, deployments)
        select user_id, organization_id, sum(delta) from (
          select o.user_id, o.organization_id, -1 as delta from removed o join added n using (id)
            where o.user_id <> n.user_id or o.organization_id <> n.organization_id
          union all
          select n.user_id, n.organization_id, 1 from removed o join added n using (id)
            where o.user_id <> n.user_id or o.organization_id <> n.organization_id
        ) moves
        group by user_id, organization_id order by user_id, organization_id
        on conflict (user_id, organization_id) do update set deployments = deployment_counts.deployments + excluded.deployments;
      return null;
    end $$;
  `);
}
