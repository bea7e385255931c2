import type { Knex } from 'knex';

/**
 * A deep page of `GET /api/v1/model-deployments` by `offset` costs what it skips: OFFSET 100,000 steps
 * over 100,101 entries of `deployments_by_owner` (18 ms for the heavy user of `make bench-db`).
 * `deployment_day_counts` holds how many deployments each user has in each organization per UTC day
 * of `created_at`, so the page's read (`listDeploymentsOf`) sums the newest days' counts up to the
 * offset and skips only within the day the page starts in.
 *
 * It is kept as `deployment_counts` is (migration `20261125100000_deployment_counts`), by
 * statement-level triggers with transition tables in the transaction of every insert, delete,
 * truncate and update that moves a row to another owner or day, so the counts are never behind what
 * the same snapshot shows; a bulk insert adds each owner's day once, and counter rows are locked in
 * (user, organization, day) order. These triggers fire after `deployment_counts`' (triggers of one
 * event fire in name order), so a statement locks an owner's total before its days, as every
 * statement does.
 *
 * An update adds -1 for each old row and +1 for each new one per (user, organization, day) and
 * writes only the sums that are not 0, as `deployment_counts_move` does since migration
 * `20261204000200_deployment_counts_move_without_join`: a join of the old rows to the new, planned
 * by PL/pgSQL for the one-row updates that are most updates, stays a nested loop for a later update
 * of thousands of rows in the session (an owner transfer of 8,219 rows took 13 s in a joining
 * version of this trigger).
 *
 * The day is `(created_at at time zone 'UTC')::date` here and the read bounds a day by
 * `(day + 1)::timestamp at time zone 'UTC'`: both in UTC whatever the session's TimeZone, so a row
 * at midnight counts in the day the read's range puts it in. A day whose deployments are all gone
 * keeps its row at 0 (as `deployment_counts` does); the read never stops at one.
 *
 * The backfill runs in this migration's transaction after the triggers exist, for the reason
 * `deployment_counts`' did: creating them locks `deployments` against writes until the commit, so
 * no write slips between count and trigger (one grouped scan of the table: about 0.5 s for 300,000
 * deployments on the development machine).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table deployment_day_counts (
      user_id integer not null references users (id) on delete cascade,
      organization_id integer not null references organizations (id) on delete cascade,
      day date not null,
      deployments integer not null,
      primary key (user_id, organization_id, day)
    );

    create function deployment_day_counts_add() returns trigger language plpgsql as $$
    begin
      insert into deployment_day_counts (user_id, organization_id, day, deployments)
        select user_id, organization_id, (created_at at time zone 'UTC')::date, count(*) from added group by 1, 2, 3 order by 1, 2, 3
        on conflict (user_id, organization_id, day) do update set deployments = deployment_day_counts.deployments + excluded.deployments;
      return null;
    end $$;

    create function deployment_day_counts_remove() returns trigger language plpgsql as $$
    begin
      update deployment_day_counts c set deployments = c.deployments - r.n
        from (select user_id, organization_id, (created_at at time zone 'UTC')::date as day, count(*) as n from removed group by 1, 2, 3 order by 1, 2, 3) r
        where c.user_id = r.user_id and c.organization_id = r.organization_id and c.day = r.day;
      return null;
    end $$;

    create function deployment_day_counts_move() returns trigger language plpgsql as $$
    begin
      insert into deployment_day_counts (user_id, organization_id, day, deployments)
        select user_id, organization_id, day, sum(delta) from (
          select user_id, organization_id, (created_at at time zone 'UTC')::date as day, -1 as delta from removed
          union all
          select user_id, organization_id, (created_at at time zone 'UTC')::date, 1 from added
        ) moves
        group by 1, 2, 3 having sum(delta) <> 0 order by 1, 2, 3
        on conflict (user_id, organization_id, day) do update set deployments = deployment_day_counts.deployments + excluded.deployments;
      return null;
    end $$;

    create function deployment_day_counts_clear() returns trigger language plpgsql as $$
    begin
      delete from deployment_day_counts;
      return null;
    end $$;

    create trigger deployment_day_counts_add after insert on deployments
      referencing new table as added for each statement execute function deployment_day_counts_add();
    create trigger deployment_day_counts_remove after delete on deployments
      referencing old table as removed for each statement execute function deployment_day_counts_remove();
    create trigger deployment_day_counts_move after update on deployments
      referencing old table as removed new table as added for each statement execute function deployment_day_counts_move();
    create trigger deployment_day_counts_clear after truncate on deployments
      for each statement execute function deployment_day_counts_clear();

    insert into deployment_day_counts (user_id, organization_id, day, deployments)
      select user_id, organization_id, (created_at at time zone 'UTC')::date, count(*) from deployments group by 1, 2, 3;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop trigger deployment_day_counts_add on deployments;
    drop trigger deployment_day_counts_remove on deployments;
    drop trigger deployment_day_counts_move on deployments;
    drop trigger deployment_day_counts_clear on deployments;
    drop function deployment_day_counts_add();
    drop function deployment_day_counts_remove();
    drop function deployment_day_counts_move();
    drop function deployment_day_counts_clear();
    drop table deployment_day_counts;
  `);
}
