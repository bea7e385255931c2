import type { Knex } from 'knex';

/**
 * `total` of `GET /api/v1/model-deployments` is exact and read in O(1): `deployment_counts` holds
 * how many deployments each user has in each organization, kept by triggers on `deployments` in
 * the transaction of every insert, delete, truncate and change of owner (`transferDeployments`),
 * so it is never behind what the same snapshot shows. Counting the rows instead reads the whole
 * `deployments_by_owner` range of the owner: 40 to 55 ms for an owner of 200,000 deployments (a
 * parallel index-only scan, docs/scaling.md), beyond the 10 ms a first page may take.
 *
 * The triggers are statement-level with transition tables, so a statement that inserts many rows
 * (a seed, a bulk import) adds each owner's count once. An update counts only rows whose owner
 * changed: every other update (status, metering) costs one join of its own rows. Counter rows are
 * locked in (user, organization) order, and a create already locks its organization's billing
 * account first (src/billing/deployment-guard.ts), so the counter adds no new wait.
 *
 * The backfill runs in this migration's transaction after the triggers exist: creating them locks
 * `deployments` against writes (SHARE ROW EXCLUSIVE) until the commit, so the backfill counts
 * every committed row and no write slips between count and trigger. Writes to deployments wait for
 * the backfill (one grouped index-only scan of `deployments_by_owner`, about 0.3 s per million
 * rows); reads go on.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table deployment_counts (
      user_id integer not null references users (id) on delete cascade,
      organization_id integer not null references organizations (id) on delete cascade,
      deployments bigint not null,
      primary key (user_id, organization_id)
    );

    create function deployment_counts_add() returns trigger language plpgsql as $$
    begin
      insert into deployment_counts (user_id, organization_id, deployments)
        select user_id, organization_id, count(*) from added group by user_id, organization_id order by user_id, organization_id
        on conflict (user_id, organization_id) do update set deployments = deployment_counts.deployments + excluded.deployments;
      return null;
    end $$;

    create function deployment_counts_remove() returns trigger language plpgsql as $$
    begin
      update deployment_counts c set deployments = c.deployments - r.n
        from (select user_id, organization_id, count(*) as n from removed group by user_id, organization_id order by user_id, organization_id) r
        where c.user_id = r.user_id and c.organization_id = r.organization_id;
      return null;
    end $$;

    create function deployment_counts_move() returns trigger language plpgsql as $$
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

    create function deployment_counts_clear() returns trigger language plpgsql as $$
    begin
      delete from deployment_counts;
      return null;
    end $$;

    create trigger deployment_counts_add after insert on deployments
      referencing new table as added for each statement execute function deployment_counts_add();
    create trigger deployment_counts_remove after delete on deployments
      referencing old table as removed for each statement execute function deployment_counts_remove();
    create trigger deployment_counts_move after update on deployments
      referencing old table as removed new table as added for each statement execute function deployment_counts_move();
    create trigger deployment_counts_clear after truncate on deployments
      for each statement execute function deployment_counts_clear();

    insert into deployment_counts (user_id, organization_id, deployments)
      select user_id, organization_id, count(*) from deployments group by user_id, organization_id;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop trigger deployment_counts_add on deployments;
    drop trigger deployment_counts_remove on deployments;
    drop trigger deployment_counts_move on deployments;
    drop trigger deployment_counts_clear on deployments;
    drop function deployment_counts_add();
    drop function deployment_counts_remove();
    drop function deployment_counts_move();
    drop function deployment_counts_clear();
    drop table deployment_counts;
  `);
}
