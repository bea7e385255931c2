import type { Knex } from 'knex';

/**
 * A version number per organization, raised by every committed change to what its whole-list
 * routes show: its invitations (and their emails, and its name, which each invitation carries),
 * its API keys and their scopes, and its deployments (a key's scope shows their model and status;
 * the deployment options list them). The interface returns those lists whole, and the heaviest
 * organization's (2,001 invitations, 1,001 keys, 1,000 live deployments) took 3 to 19 ms to read
 * and parse (`make bench-db`); `OrganizationListCache` keeps a large list per process and reads
 * only this version before reusing it.
 *
 * The triggers are constraint triggers deferred to the commit: the version's row is locked from the
 * bump to the commit, so bumping at the end keeps that lock short and taken after every row lock of
 * the transaction (two transactions of one organization cannot wait on each other through it). An
 * organization without a row is at version 0. Nothing to backfill: the first change creates the row.
 *
 * A key's use (`last_used_at`, written at most once a minute per key, and the `updated_at` that
 * goes with it) raises nothing: with a thousand keys in use, the list would otherwise change every
 * few milliseconds. The key list is instead kept at most a minute (`ApiKeysService.list`), so its
 * `last_used_at` is at most a minute older than the stored one, itself written at most once a minute.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table organization_list_versions (
      organization_id integer primary key references organizations (id) on delete cascade,
      version bigint not null
    );

    create function organization_lists_changed() returns trigger language plpgsql as $$
    declare
      changed record := case when TG_OP = 'DELETE' then OLD else NEW end;
      org integer;
    begin
      if TG_TABLE_NAME = 'organizations' then
        org := changed.id;
      elsif TG_TABLE_NAME = 'emails' then
        select organization_id into org from invitations where id = coalesce(changed.invitation_id, OLD.invitation_id);
      elsif TG_TABLE_NAME = 'api_key_deployments' then
        select organization_id into org from api_keys where id = changed.api_key_id;
      else
        org := changed.organization_id;
      end if;
      -- Once per organization and transaction: every change of the transaction commits with it.
      -- (Raising one row again for each of the 200,000 rows a bulk statement changes made each
      -- raise walk the row's versions of that transaction: quadratic, minutes for a bulk insert.)
      if org is null or current_setting('mds_list_versions.raised_' || org, true) = 'yes' then
        return null;
      end if;
      perform set_config('mds_list_versions.raised_' || org, 'yes', true);
      -- Gone with its organization (or its invitation or key, whose own change was counted).
      if not exists (select 1 from organizations where id = org) then
        return null;
      end if;
      insert into organization_list_versions as v (organization_id, version) values (org, 1)
        on conflict (organization_id) do update set version = v.version + 1;
      return null;
    end $$;

    create constraint trigger invitations_lists_changed after insert or update or delete on invitations
      deferrable initially deferred for each row execute function organization_lists_changed();
    create constraint trigger emails_lists_changed after insert or delete or update of status, last_error, sent_at, invitation_id on emails
      deferrable initially deferred for each row execute function organization_lists_changed();
    create constraint trigger organizations_lists_changed after update of name on organizations
      deferrable initially deferred for each row execute function organization_lists_changed();
    create constraint trigger api_keys_lists_changed after insert or delete on api_keys
      deferrable initially deferred for each row execute function organization_lists_changed();
    create constraint trigger api_keys_lists_changed_but_use after update on api_keys
      deferrable initially deferred for each row
      when ((to_jsonb(old) - 'last_used_at' - 'updated_at') is distinct from (to_jsonb(new) - 'last_used_at' - 'updated_at'))
      execute function organization_lists_changed();
    create constraint trigger api_key_deployments_lists_changed after insert or update or delete on api_key_deployments
      deferrable initially deferred for each row execute function organization_lists_changed();
    create constraint trigger deployments_lists_changed after insert or delete or update of status, model_name, organization_id, created_at on deployments
      deferrable initially deferred for each row execute function organization_lists_changed();
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop trigger invitations_lists_changed on invitations;
    drop trigger emails_lists_changed on emails;
    drop trigger organizations_lists_changed on organizations;
    drop trigger api_keys_lists_changed on api_keys;
    drop trigger api_keys_lists_changed_but_use on api_keys;
    drop trigger api_key_deployments_lists_changed on api_key_deployments;
    drop trigger deployments_lists_changed on deployments;
    drop function organization_lists_changed();
    drop table organization_list_versions;
  `);
}
