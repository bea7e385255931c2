import type { Knex } from 'knex';

/**
 * A version per organization and list, where 20261126100000 had one per organization: a change
 * raises only the lists that show it. With one version, every status change of any deployment
 * emptied the kept invitations and keys of its organization, and an organization with live
 * deployments changes status all the time (an independent check measured the heavy organization's
 * invitations at 48.8 ms p50 after one change, 2.4 ms kept). Now:
 *
 * - `invitations`: invitations, their emails, the organization's name (each invitation shows it);
 * - `api_keys`: keys (not their use), their scopes, and a deployment's change only when some key's
 *   scope names it (a key shows its scoped deployments' model and status);
 * - `deployment_options`: the organization's deployments (created, deleted, moved, status, model).
 *
 * `version` stays, raised by every change as before, for processes of the previous release that
 * read it during a rollout. The triggers keep their shape (constraint triggers deferred to the
 * commit, once per organization, list and transaction); each names the lists it raises as its
 * arguments. A deployment moved to another organization (`transferDeployments`) changes the lists
 * of both. Nothing to backfill: a list without its column raised is at 0, and a process keeps
 * nothing across the migration that a 0 could be mistaken for (a kept list is in memory and keyed
 * by the list's own column from now on).
 */
const LISTS = ['invitations', 'api_keys', 'deployment_options'] as const;

/** Each table's triggers: the lists they raise, and on which changes. */
const TRIGGERS = [
  ['invitations_lists_changed', 'invitations', 'after insert or update or delete', null, ['invitations']],
  ['emails_lists_changed', 'emails', 'after insert or delete or update of status, last_error, sent_at, invitation_id', null, ['invitations']],
  ['organizations_lists_changed', 'organizations', 'after update of name', null, ['invitations']],
  ['api_keys_lists_changed', 'api_keys', 'after insert or delete', null, ['api_keys']],
  [
    'api_keys_lists_changed_but_use',
    'api_keys',
    'after update',
    `(to_jsonb(old) - 'last_used_at' - 'updated_at') is distinct from (to_jsonb(new) - 'last_used_at' - 'updated_at')`,
    ['api_keys'],
  ],
  ['api_key_deployments_lists_changed', 'api_key_deployments', 'after insert or update or delete', null, ['api_keys']],
  ['deployments_lists_changed', 'deployments', 'after insert or delete or update of status, model_name, organization_id, created_at', null, ['deployment_options', 'api_keys']],
] as const;

/**
 * The body of `organization_lists_changed()` from this migration (after `create function
 * organization_lists_changed()`); 20261205000000 restores it on its way down.
 */
export const LISTS_CHANGED = `returns trigger language plpgsql as $$
declare
  changed record := case when TG_OP = 'DELETE' then OLD else NEW end;
  orgs integer[];
  org integer;
  list text;
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
    foreach list in array TG_ARGV loop
      -- Once per organization, list and transaction: every change of the transaction commits
      -- with it. (Raising a row again for each of the 200,000 rows a bulk statement changes
      -- walks the row's versions of that transaction: quadratic, minutes for a bulk insert.)
      continue when org is null or current_setting('mds_list_versions.raised_' || org || '_' || list, true) = 'yes';
      -- A deployment shows in the key list only through a key's scope, and only an update can
      -- reach a key: a new deployment is in no scope yet (a scope added with it raises the list
      -- itself), and a deleted one leaves its scopes by their own delete. (Nested: an
      -- expression is planned when first run, and other tables' ids are not UUIDs.)
      if TG_TABLE_NAME = 'deployments' and list = 'api_keys' then
        continue when TG_OP <> 'UPDATE' or not exists (select 1 from api_key_deployments where deployment_id = changed.id);
      end if;
      perform set_config('mds_list_versions.raised_' || org || '_' || list, 'yes', true);
      -- Gone with its organization (or its invitation or key, whose own change was counted).
      continue when not exists (select 1 from organizations where id = org);
      execute format(
        'insert into organization_list_versions as v (organization_id, version, %1$I) values ($1, 1, 1)
           on conflict (organization_id) do update set version = v.version + 1, %1$I = v.%1$I + 1', list) using org;
    end loop;
  end loop;
  return null;
end $$;`;

function createTriggers(fn: string, withArguments: boolean): string {
  return TRIGGERS.map(
    ([name, table, events, when, lists]) => `
      create constraint trigger ${name} ${events} on ${table}
        deferrable initially deferred for each row ${when ? `when (${when})` : ''}
        execute function ${fn}(${withArguments ? lists.map((list) => `'${list}'`).join(', ') : ''});`,
  ).join('\n');
}

const dropTriggers = (): string => TRIGGERS.map(([name, table]) => `drop trigger ${name} on ${table};`).join('\n');

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    ${dropTriggers()}
    drop function organization_lists_changed();
    alter table organization_list_versions
      ${LISTS.map((list) => `add column ${list} bigint not null default 0`).join(',\n      ')};

    create function organization_lists_changed() ${LISTS_CHANGED}
    ${createTriggers('organization_lists_changed', true)}
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    ${dropTriggers()}
    drop function organization_lists_changed();
    alter table organization_list_versions ${LISTS.map((list) => `drop column ${list}`).join(', ')};
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
      if org is null or current_setting('mds_list_versions.raised_' || org, true) = 'yes' then
        return null;
      end if;
      perform set_config('mds_list_versions.raised_' || org, 'yes', true);
      if not exists (select 1 from organizations where id = org) then
        return null;
      end if;
      insert into organization_list_versions as v (organization_id, version) values (org, 1)
        on conflict (organization_id) do update set version = v.version + 1;
      return null;
    end $$;
    ${createTriggers('organization_lists_changed', false)}
  `);
}
