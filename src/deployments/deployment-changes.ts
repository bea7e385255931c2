import type { Knex } from 'knex';
import { announceChange, CHANGE_CHANNELS } from '../db/change-listener.ts';
import type { DeploymentEventRow, DeploymentScale } from '../db/models/deployment-events.ts';
import type { DeploymentRow } from '../db/models/deployments.ts';
import { inTransaction } from '../db/query.ts';
import { statusChangeMessage } from '../events/event-messages.ts';
import { engineEventKey, importedEngineEvents, insertDeploymentEvent, latestEvent, type NewDeploymentEvent } from '../events/events.repository.ts';
import { addDeliveriesOf } from '../webhooks/webhooks.repository.ts';
import { replicasOnMove, type DeploymentStatus } from './deployment-states.ts';
import { findDeployment, insertDeploymentRow, lockDeploymentIn, moveReplicas, updateDeploymentStatus, type NewDeployment, type StatusMove } from './deployments.repository.ts';

type Db = Knex | Knex.Transaction;

/**
 * What goes with every change of a deployment, in one transaction (the caller's, or one of its
 * own): the row, its replicas, the event in its log, a delivery to each organization webhook endpoint that takes
 * the event's type, and a notification every process receives once it commits (the event streams).
 * The repositories below write one table each; this is the one place that composes them.
 */

/** Stores a new deployment (`requested`), and its first event. */
export async function insertDeployment(db: Db, deployment: NewDeployment): Promise<DeploymentRow> {
  return inTransaction(db, async (trx) => {
    const row = await insertDeploymentRow(trx, deployment);
    await recordEvent(trx, {
      deployment_id: row.id,
      organization_id: row.organization_id,
      type: 'deployment.status_changed',
      from_status: null,
      to_status: row.status,
      message: statusChangeMessage(row.status, {}),
    });
    return row;
  });
}

/**
 * Moves the deployment to `to` only if it is still in one of the statuses `from` (compare and set),
 * with `changes`, and its replicas with it (`replicasOnMove`: made ready as it enters running,
 * stopped with their GPUs released as it is terminated); false when it had moved on. The caller
 * takes `to` from the state machine.
 */
export async function moveDeployment(db: Db, id: string, move: StatusMove): Promise<boolean> {
  return inTransaction(db, async (trx) => {
    const before = await lockDeploymentIn(trx, id, move.from);
    if (!before) return false;
    const replicas = replicasOnMove(move.to);
    if (replicas) await moveReplicas(trx, id, replicas);
    await updateDeploymentStatus(trx, id, move);
    await recordEvent(trx, {
      deployment_id: id,
      organization_id: before.organization_id,
      type: 'deployment.status_changed',
      from_status: before.status,
      to_status: move.to,
      failure_stage: move.to === 'failed' ? (move.changes?.failure_stage ?? null) : null,
      message: statusChangeMessage(move.to, { selectionReason: move.changes?.selection_reason, failureReason: move.changes?.failure_reason }),
    });
    return true;
  });
}

/**
 * Appends a provisioning step (progress while the model loads, a stop waited for) to the
 * deployment's events if it is still in `status`, under its row lock. A step whose progress and
 * message are those of the latest event is not appended again; false when nothing was appended.
 */
export async function recordProvisioningStep(
  db: Db,
  id: string,
  step: { status: DeploymentStatus; step: NonNullable<DeploymentEventRow['step']>; progress: number | null; message: string },
): Promise<boolean> {
  return inTransaction(db, async (trx) => {
    const row = await lockDeploymentIn(trx, id, step.status);
    if (!row) return false;
    const latest = await latestEvent(trx, id);
    if (latest?.step === step.step && latest.message === step.message) return false;
    await recordEvent(trx, {
      deployment_id: id,
      organization_id: row.organization_id,
      type: 'deployment.provisioning_step',
      from_status: null,
      to_status: step.status,
      step: step.step,
      progress: step.progress,
      message: step.message,
    });
    return true;
  });
}

/**
 * Records a scale action of the deployment (`deployment.scaled`: the desired replicas before and
 * after, and why) if it is still in `status`, under its row lock, with its webhook deliveries and
 * notification; false when the deployment had moved on. The caller writes the new count.
 */
export async function recordScale(db: Db, id: string, event: { status: DeploymentStatus; scale: DeploymentScale; message: string }): Promise<boolean> {
  return inTransaction(db, async (trx) => {
    const row = await lockDeploymentIn(trx, id, event.status);
    if (!row) return false;
    await recordEvent(trx, {
      deployment_id: id,
      organization_id: row.organization_id,
      type: 'deployment.scaled',
      from_status: null,
      to_status: event.status,
      scale: event.scale,
      message: event.message,
    });
    return true;
  });
}

/** An engine event of one of the deployment's replicas (src/deployments/engine-log.ts reads them). */
export interface ReplicaEngineEvent {
  /** The replica's ordinal. */
  replica: number;
  level: NonNullable<DeploymentEventRow['engine_level']>;
  /** By the engine's clock, whole seconds. */
  occurredAt: Date;
  message: string;
}

/**
 * Appends the engine's events of the deployment's replicas that its log does not hold yet
 * (`deployment.engine_event`), oldest first by the engine's clock (one replica's events keep the
 * engine's order), under its row lock, each with its webhook deliveries and notification; the
 * deployment's status, whichever it is, is the events' `to_status`. Returns how many were appended.
 */
export async function recordEngineEvents(db: Db, id: string, events: readonly ReplicaEngineEvent[]): Promise<number> {
  if (!events.length) return 0;
  return inTransaction(db, async (trx) => {
    const row = await findDeployment(trx, id, { forUpdate: true });
    if (!row) return 0;
    const rows = events
      .map((event, order) => ({ event, order }))
      .sort((a, b) => a.event.occurredAt.getTime() - b.event.occurredAt.getTime() || a.order - b.order)
      .map(({ event }) => ({ engine_replica: event.replica, engine_occurred_at: event.occurredAt, engine_level: event.level, message: event.message }));
    const seen = await importedEngineEvents(trx, id, rows);
    let appended = 0;
    for (const engine of rows) {
      const key = engineEventKey(engine);
      if (seen.has(key)) continue;
      seen.add(key);
      await recordEvent(trx, { deployment_id: id, organization_id: row.organization_id, type: 'deployment.engine_event', from_status: null, to_status: row.status, ...engine });
      appended++;
    }
    return appended;
  });
}

/**
 * The event, its webhook deliveries and its notification. The caller's transaction holds the
 * deployment's row lock, so the event's id is taken under it: one deployment's events commit in
 * the order of their ids, and a reader that resumes after an id (SSE `Last-Event-ID`) never skips
 * one committed later.
 */
async function recordEvent(trx: Knex.Transaction, event: NewDeploymentEvent): Promise<void> {
  const row = await insertDeploymentEvent(trx, event);
  await addDeliveriesOf(trx, row);
  await announceChange(trx, CHANGE_CHANNELS.deploymentEvent, row.deployment_id);
}
