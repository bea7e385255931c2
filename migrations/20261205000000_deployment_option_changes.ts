import type { Knex } from 'knex';
import { LISTS_CHANGED } from './20261204000000_list_versions_per_list.ts';

/**
 * What changed in an organization's deployment options, by version, so a process that keeps the
 * list (`OrganizationListCache`) patches the deployments that changed instead of reading the whole
 * list again. The options show every deployment's status, so every status change raises their
 * version: under the churn of `make bench-db` (a status change before every call) the heavy
 * organization's 1,000 options were read whole every call, 2.5 to 2.6 ms p50 against 1.1 to 1.3 kept.
 *
 * `organization_lists_changed()` logs each deployment a transaction changes with the version the
 * transaction raised the list to. The versions are in commit order: raising one locks the
 * organization's row of `organization_list_versions` until the commit, so a transaction that raises
 * it later waits for every earlier one to commit, and a reader that sees version V can read every
 * change up to V. A row with no deployment says "read the whole list again": written for a
 * deployment that joins the list (created, moved in, or whose `created_at` changed: its place in the
 * order is new), and once instead of the 101st change of one transaction (a bulk statement).
 *
 * The log keeps the last 1,000 versions of each organization: the first change a transaction logs
 * deletes the versions before those. A reader whose kept list is older, or that finds a version
 * missing from the range it reads, reads the whole list.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table deployment_option_changes (
      organization_id integer not null references organizations (id) on delete cascade,
      version bigint not null,
      -- The change's place among its transaction's changes to the organization's options.
      position smallint not null,
      -- Null: read the whole list again.
      deployment_id uuid,
      primary key (organization_id, version, position)
    );

    -- Logs one change of the organization's options at the transaction's version and place
    -- (\`logged\`: the changes it logged before); returns the next place, or -1 once it asked for the
    -- whole list (after which the transaction logs nothing more).
    create function deployment_option_changed(org integer, at_version bigint, logged integer, deployment uuid, joins boolean) returns integer
    language plpgsql as $$
    begin
      if logged = 0 then
        delete from deployment_option_changes where organization_id = org and version <= at_version - 1000;
      end if;
      if joins or logged >= 100 then
        insert into deployment_option_changes (organization_id, version, position, deployment_id) values (org, at_version, logged, null);
        return -1;
      end if;
      insert into deployment_option_changes (organization_id, version, position, deployment_id) values (org, at_version, logged, deployment);
      return logged + 1;
    end $$;

    create or replace function organization_lists_changed() returns trigger language plpgsql as $$
    declare
      changed record := case when TG_OP = 'DELETE' then OLD else NEW end;
      orgs integer[];
      org integer;
      list text;
      raised bigint;
      setting text;
      state text;
    begin
      if TG_TABLE_NAME = 'organizations' then
        orgs := array[changed.id];
      elsif TG_TABLE_NAME = 'emails' then
        orgs := array(select organization_id from invitations where id = coalesce(changed.invitation_id, OLD.invitation_id));
      elsif TG_TABLE_NAME = 'api_key_deployments' then
        orgs := array(select organization_id from api_keys where id = changed.api_key_id);
      elsif TG_OP = 'UPDATE' and OLD.organization_id is distinct from NEW.organization_id then
        orgs := array[OLD.organization_id, NEW.organization_id];
      else
        orgs := array[changed.organization_id];
      end if;
      foreach org in array orgs loop
        continue when org is null;
        foreach list in array TG_ARGV loop
          -- Once per organization, list and transaction: every change of the transaction commits
          -- with it. (Raising a row again for each of the 200,000 rows a bulk statement changes
          -- walks the row's versions of that transaction: quadratic, minutes for a bulk insert.)
          -- The setting holds what the transaction did: 'gone' (no organization), the version it
          -- raised the list to, and for the deployment options ':' and the changes it logged (-1:
          -- it asked for the whole list). One setting per organization and list: Postgres 15 sorts
          -- all of a session's settings each time one is added, so a second one per organization
          -- made seeding a million deployments over 10,000 organizations take 577 s instead of 198.
          setting := 'mds_list_versions.raised_' || org || '_' || list;
          state := coalesce(current_setting(setting, true), '');
          if state = '' then
            -- A deployment shows in the key list only through a key's scope, and only an update can
            -- reach a key: a new deployment is in no scope yet (a scope added with it raises the list
            -- itself), and a deleted one leaves its scopes by their own delete. (Nested: an
            -- expression is planned when first run, and other tables' ids are not UUIDs.)
            if TG_TABLE_NAME = 'deployments' and list = 'api_keys' then
              continue when TG_OP <> 'UPDATE' or not exists (select 1 from api_key_deployments where deployment_id = changed.id);
            end if;
            -- Gone with its organization (or its invitation or key, whose own change was counted).
            if not exists (select 1 from organizations where id = org) then
              perform set_config(setting, 'gone', true);
              continue;
            end if;
            execute format(
              'insert into organization_list_versions as v (organization_id, version, %1$I) values ($1, 1, 1)
                 on conflict (organization_id) do update set version = v.version + 1, %1$I = v.%1$I + 1
                 returning %1$I', list) using org into raised;
            state := raised || case when list = 'deployment_options' then ':0' else '' end;
            perform set_config(setting, state, true);
          end if;
          -- (A bulk insert's rows after its first stop here: the first asked for the whole list.)
          if TG_TABLE_NAME = 'deployments' and list = 'deployment_options' and state <> 'gone' and split_part(state, ':', 2) <> '-1' then
            perform set_config(setting, split_part(state, ':', 1) || ':' || deployment_option_changed(
              org,
              split_part(state, ':', 1)::bigint,
              split_part(state, ':', 2)::integer,
              changed.id,
              TG_OP = 'INSERT' or (TG_OP = 'UPDATE' and (OLD.created_at is distinct from NEW.created_at or (org = NEW.organization_id and OLD.organization_id is distinct from org)))
            ), true);
          end if;
        end loop;
      end loop;
      return null;
    end $$;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    create or replace function organization_lists_changed() ${LISTS_CHANGED}
    drop function deployment_option_changed(integer, bigint, integer, uuid, boolean);
    drop table deployment_option_changes;
  `);
}
