import type { Knex } from 'knex';

/**
 * `total` of `GET /v1/organization/webhook-endpoints/{id}/attempts` is exact and read in O(1):
 * `webhook_attempt_counts` holds each endpoint's number of delivery attempts, kept by statement
 * triggers on `webhook_delivery_attempts` (insert, delete, including the deletes cascaded from a
 * pruned delivery, and truncate) in the transaction of the change, as `deployment_counts` does for
 * deployments (20261125100000). Counting the rows instead was a scan of the endpoint's attempts:
 * 15 ms for an endpoint with 100,000 (30 days of a busy endpoint, `make bench-db`). An attempt
 * never moves to another endpoint, so updates need no trigger.
 *
 * The backfill runs after the triggers exist, in this migration's transaction: creating them locks
 * the table against writes until the commit, so no attempt slips between count and trigger.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table webhook_attempt_counts (
      endpoint_id uuid primary key references webhook_endpoints (id) on delete cascade,
      attempts bigint not null
    );

    create function webhook_attempt_counts_add() returns trigger language plpgsql as $$
    begin
      insert into webhook_attempt_counts (endpoint_id, attempts)
        select endpoint_id, count(*) from added group by endpoint_id order by endpoint_id
        on conflict (endpoint_id) do update set attempts = webhook_attempt_counts.attempts + excluded.attempts;
      return null;
    end $$;

    create function webhook_attempt_counts_remove() returns trigger language plpgsql as $$
    begin
      update webhook_attempt_counts c set attempts = c.attempts - r.n
        from (select endpoint_id, count(*) as n from removed group by endpoint_id order by endpoint_id) r
        where c.endpoint_id = r.endpoint_id;
      return null;
    end $$;

    create function webhook_attempt_counts_clear() returns trigger language plpgsql as $$
    begin
      delete from webhook_attempt_counts;
      return null;
    end $$;

    create trigger webhook_attempt_counts_add after insert on webhook_delivery_attempts
      referencing new table as added for each statement execute function webhook_attempt_counts_add();
    create trigger webhook_attempt_counts_remove after delete on webhook_delivery_attempts
      referencing old table as removed for each statement execute function webhook_attempt_counts_remove();
    create trigger webhook_attempt_counts_clear after truncate on webhook_delivery_attempts
      for each statement execute function webhook_attempt_counts_clear();

    insert into webhook_attempt_counts (endpoint_id, attempts)
      select endpoint_id, count(*) from webhook_delivery_attempts group by endpoint_id;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop trigger webhook_attempt_counts_add on webhook_delivery_attempts;
    drop trigger webhook_attempt_counts_remove on webhook_delivery_attempts;
    drop trigger webhook_attempt_counts_clear on webhook_delivery_attempts;
    drop function webhook_attempt_counts_add();
    drop function webhook_attempt_counts_remove();
    drop function webhook_attempt_counts_clear();
    drop table webhook_attempt_counts;
  `);
}
