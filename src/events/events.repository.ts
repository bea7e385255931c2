import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import { DeploymentEventRow } from '../db/models/deployment-events.ts';

export type DeploymentEvent = components['schemas']['DeploymentEvent'];
type Db = Knex | Knex.Transaction;

/** What an appended event says; its id and time come from Postgres. */
export type NewDeploymentEvent = Pick<DeploymentEventRow, 'deployment_id' | 'organization_id' | 'type' | 'from_status' | 'to_status'> &
  Partial<Pick<DeploymentEventRow, 'step' | 'progress' | 'failure_stage' | 'message' | 'scale' | 'engine_level' | 'engine_occurred_at' | 'engine_replica'>>;

/** Stores an event of the log (src/deployments/deployment-changes.ts says when, and what goes with it). */
export async function insertDeploymentEvent(trx: Knex.Transaction, event: NewDeploymentEvent): Promise<DeploymentEventRow> {
  return DeploymentEventRow.query(trx).insert(event).returning('*');
}

/** The deployment's events after `afterId` (all of them without one), oldest first, at most `limit`. */
export async function eventsAfter(db: Db, deploymentId: string, afterId: string | undefined, limit: number): Promise<DeploymentEventRow[]> {
  const query = DeploymentEventRow.query(db).where({ deployment_id: deploymentId }).orderBy('id').limit(limit);
  return afterId === undefined ? query : query.where('id', '>', afterId);
}

/**
 * Which of these engine events of the deployment are in its log already, keyed as `engineEventKey`
 * (the caller holds the deployment's row lock, so none is appended meanwhile).
 */
export async function importedEngineEvents(
  db: Db,
  deploymentId: string,
  events: ReadonlyArray<Pick<DeploymentEventRow, 'engine_replica' | 'engine_occurred_at'>>,
): Promise<Set<string>> {
  const times = [...new Set(events.map((event) => (event.engine_occurred_at as Date).toISOString()))];
  if (!times.length) return new Set();
  const rows = await DeploymentEventRow.query(db)
    .where({ deployment_id: deploymentId, type: 'deployment.engine_event' })
    .whereIn('engine_occurred_at', times)
    .select('engine_replica', 'engine_occurred_at', 'engine_level', 'message');
  return new Set(rows.map(engineEventKey));
}

/** What makes an engine event the same one (the unique index `deployment_events_engine_once`). */
export function engineEventKey(event: Pick<DeploymentEventRow, 'engine_replica' | 'engine_occurred_at' | 'engine_level' | 'message'>): string {
  return JSON.stringify([event.engine_replica, event.engine_occurred_at?.toISOString(), event.engine_level, event.message]);
}

/** The deployment's latest event (the last progress reported, say). */
export async function latestEvent(db: Db, deploymentId: string): Promise<DeploymentEventRow | undefined> {
  return DeploymentEventRow.query(db).where({ deployment_id: deploymentId }).orderBy('id', 'desc').first();
}

export async function findEvent(db: Db, id: string): Promise<DeploymentEventRow | undefined> {
  return DeploymentEventRow.query(db).findById(id);
}

export function toDeploymentEvent(row: DeploymentEventRow): DeploymentEvent {
  return {
    id: Number(row.id),
    type: row.type,
    deployment_id: row.deployment_id,
    organization_id: String(row.organization_id),
    from_status: row.from_status,
    to_status: row.to_status,
    step: row.step,
    progress: row.progress === null ? null : Number(row.progress),
    failure_stage: row.failure_stage,
    scale: row.scale,
    engine_event:
      row.engine_level && row.engine_occurred_at && row.engine_replica !== null
        ? { level: row.engine_level, occurred_at: row.engine_occurred_at.toISOString(), replica: row.engine_replica }
        : null,
    message: row.message,
    created_at: row.created_at.toISOString(),
  };
}
