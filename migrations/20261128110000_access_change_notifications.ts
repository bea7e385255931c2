import type { Knex } from 'knex';

/**
 * A user's access changed: Postgres announces it on the channel `access_changed` (payload: the
 * user's id) when the transaction that changed it commits, so that every API process ends what the
 * user had open on the strength of it (deployment event streams, src/events/event-streams.ts).
 *
 * - Sessions deleted, by any statement: sign-out, revocation, "sign out everywhere else", a
 *   password reset or SSO link that ends sessions, removal from an organization, expiry pruning,
 *   and deletions that cascade from a user. One notification per user per statement (a transition
 *   table), however many sessions went.
 * - A session moved to another organization (`organization_id` changed).
 * - Memberships deleted (removal, leaving) or their role changed.
 *
 * Triggers rather than calls in each code path: a path added later cannot forget to announce.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create function announce_access_changed_of_rows() returns trigger language plpgsql as $$
    begin
      perform pg_notify('access_changed', changed.user_id::text) from (select distinct user_id from old_rows) as changed;
      return null;
    end
    $$;

    create function announce_access_changed_of_row() returns trigger language plpgsql as $$
    begin
      perform pg_notify('access_changed', new.user_id::text);
      return null;
    end
    $$;

    create trigger sessions_access_changed after delete on sessions
      referencing old table as old_rows for each statement execute function announce_access_changed_of_rows();
    create trigger sessions_organization_access_changed after update of organization_id on sessions
      for each row when (old.organization_id is distinct from new.organization_id) execute function announce_access_changed_of_row();
    create trigger memberships_access_changed after delete on memberships
      referencing old table as old_rows for each statement execute function announce_access_changed_of_rows();
    create trigger memberships_role_access_changed after update of role on memberships
      for each row when (old.role is distinct from new.role) execute function announce_access_changed_of_row();
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop trigger memberships_role_access_changed on memberships;
    drop trigger memberships_access_changed on memberships;
    drop trigger sessions_organization_access_changed on sessions;
    drop trigger sessions_access_changed on sessions;
    drop function announce_access_changed_of_row();
    drop function announce_access_changed_of_rows();
  `);
}
