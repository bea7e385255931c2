import type { Knex } from 'knex';

/**
 * Engine credentials as Xinference 3.x wants them, and what the engine tells us about a model's
 * health:
 *
 * - `auth_mode`: `advanced` (Xinference's default since 3.0: management calls as an admin user,
 *   inference with an API key) or `none` (a cluster run with `XINFERENCE_AUTH_ADVANCED=0` behind
 *   network isolation, registered as such on purpose).
 * - `sealed_management_credential`: the admin user's name and password, sealed with the server key
 *   (the access token it logs in for is kept only in memory and refreshed before it expires).
 *   `sealed_credential` stays the inference API key (`models:read`), which the relay sends.
 * - `status` gains `credentials_invalid`: the engine refused a credential; the cluster's calls stop
 *   until an operator registers or checks it again (`status_reason` says why, `status_changed_at` when).
 * - `engine_version`: the Xinference version read at sync (request shapes differ between versions).
 * - `deployments.engine_unhealthy_since`: when the engine first reported a running model as not
 *   ready (auto-recovery in progress); the reconciler fails it only after a grace period.
 *
 * A cluster registered before this migration with only an API key cannot manage models on
 * Xinference 3.x (API keys may not launch or terminate); it is marked `credentials_invalid` until
 * its operator registers it again with an admin user.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table clusters
      add column auth_mode text not null default 'advanced' check (auth_mode in ('advanced', 'none')),
      add column sealed_management_credential text,
      add column status_reason text,
      add column status_changed_at timestamptz not null default now(),
      add column engine_version text,
      drop constraint clusters_status_check,
      add constraint clusters_status_check check (status in ('active', 'disabled', 'credentials_invalid'));

    update clusters set auth_mode = 'none' where sealed_credential is null;
    update clusters
       set status = 'credentials_invalid',
           status_reason = 'Registered with an API key only: Xinference 3.x needs an admin user for management calls; register the cluster again with --admin-user.'
     where sealed_credential is not null and status = 'active';

    alter table deployments add column engine_unhealthy_since timestamptz;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table deployments drop column engine_unhealthy_since;
    update clusters set status = 'disabled' where status = 'credentials_invalid';
    alter table clusters
      drop constraint clusters_status_check,
      add constraint clusters_status_check check (status in ('active', 'disabled')),
      drop column auth_mode,
      drop column sealed_management_credential,
      drop column status_reason,
      drop column status_changed_at,
      drop column engine_version;
  `);
}
