import type { Knex } from 'knex';

/**
 * The serving engine's events of a deployment's replicas in its event log (docs/events-and-webhooks.md,
 * Engine events): the type `deployment.engine_event`, with the engine event's level, its time by the
 * engine's clock (whole seconds) and the replica's ordinal; `message` holds the engine's text. Each
 * engine event is appended once: the unique index is on the deployment, the replica, the engine's
 * time, the level and the text (an md5 of it: a text may outgrow an index entry). Two identical
 * events of one replica in the same second are one (the engine's whole seconds cannot tell them apart).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table deployment_events
      drop constraint deployment_events_type_check,
      add constraint deployment_events_type_check
        check (type in ('deployment.status_changed', 'deployment.provisioning_step', 'deployment.scaled', 'deployment.engine_event')),
      add column engine_level text check (engine_level in ('info', 'warning', 'error')),
      add column engine_occurred_at timestamptz,
      add column engine_replica integer check (engine_replica >= 0),
      add constraint deployment_events_engine_fields check (
        (type = 'deployment.engine_event') = (engine_level is not null and engine_occurred_at is not null and engine_replica is not null and message is not null)
        and (type = 'deployment.engine_event' or (engine_level is null and engine_occurred_at is null and engine_replica is null))
      );

    create unique index deployment_events_engine_once
      on deployment_events (deployment_id, engine_replica, engine_occurred_at, engine_level, md5(message))
      where type = 'deployment.engine_event';
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop index deployment_events_engine_once;
    delete from deployment_events where type = 'deployment.engine_event';
    alter table deployment_events
      drop constraint deployment_events_engine_fields,
      drop column engine_level,
      drop column engine_occurred_at,
      drop column engine_replica,
      drop constraint deployment_events_type_check,
      add constraint deployment_events_type_check check (type in ('deployment.status_changed', 'deployment.provisioning_step', 'deployment.scaled'));
  `);
}
