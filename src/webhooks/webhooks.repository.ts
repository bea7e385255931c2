import type { Knex } from 'knex';
import type { DeploymentEventRow } from '../db/models/deployment-events.ts';
import { WebhookAttemptRow, WebhookDeliveryRow, WebhookEndpointRow } from '../db/models/webhooks.ts';
import { isUuid } from '../validation.ts';

/** Every query of the webhooks area: endpoints, deliveries and their attempts. */
type Db = Knex | Knex.Transaction;

// ---- endpoints

export async function insertEndpoint(
  db: Db,
  endpoint: Pick<WebhookEndpointRow, 'organization_id' | 'url' | 'description' | 'event_types' | 'sealed_secret' | 'created_by_user_id'>,
): Promise<WebhookEndpointRow> {
  return WebhookEndpointRow.query(db).insert(endpoint).returning('*');
}

export async function listEndpointsOf(db: Db, organizationId: number): Promise<WebhookEndpointRow[]> {
  return WebhookEndpointRow.query(db).where({ organization_id: organizationId }).orderBy([
    { column: 'created_at', order: 'asc' },
    { column: 'id', order: 'asc' },
  ]);
}

/**
 * One endpoint of the organization (undefined for an id that is not a UUID); locked when asked,
 * FOR NO KEY UPDATE (the deliveries a status change inserts meanwhile do not wait for it).
 */
export async function findEndpointOf(db: Db, organizationId: number, id: string, options: { forUpdate?: boolean } = {}): Promise<WebhookEndpointRow | undefined> {
  if (!isUuid(id)) return undefined;
  const query = WebhookEndpointRow.query(db).where({ organization_id: organizationId, id });
  return options.forUpdate ? query.forNoKeyUpdate().first() : query.first();
}

/** How many endpoints the organization has. */
export async function countEndpointsOf(db: Db, organizationId: number): Promise<number> {
  return WebhookEndpointRow.query(db).where({ organization_id: organizationId }).resultSize();
}

export async function updateEndpoint(
  db: Db,
  id: string,
  changes: Partial<
    Pick<
      WebhookEndpointRow,
      | 'url'
      | 'description'
      | 'event_types'
      | 'status'
      | 'disabled_reason'
      | 'disabled_at'
      | 'consecutive_failures'
      | 'sealed_secret'
      | 'previous_sealed_secret'
      | 'previous_secret_expires_at'
    >
  >,
): Promise<WebhookEndpointRow> {
  return WebhookEndpointRow.query(db).patchAndFetchById(id, changes);
}

export async function deleteEndpoint(db: Db, id: string): Promise<void> {
  await WebhookEndpointRow.query(db).deleteById(id);
}

// ---- deliveries

/**
 * A delivery of the event to each enabled endpoint of its organization that takes its type, in the
 * event's transaction; the dispatcher queues their jobs (queued_at is null until then).
 */
export async function addDeliveriesOf(trx: Knex.Transaction, event: DeploymentEventRow): Promise<number> {
  const { rowCount } = await trx.raw<{ rowCount: number }>(
    `insert into webhook_deliveries (endpoint_id, event_id, event_type)
     select id, ?, ? from webhook_endpoints
      where organization_id = ? and status = 'enabled' and (event_types is null or ? = any (event_types))`,
    [event.id, event.type, event.organization_id, event.type],
  );
  return rowCount;
}

/** A test delivery to the endpoint, its job queued by the caller in the same transaction. */
export async function insertTestDelivery(trx: Knex.Transaction, endpointId: string): Promise<WebhookDeliveryRow> {
  return WebhookDeliveryRow.query(trx).insert({ endpoint_id: endpointId, event_type: 'webhook.test', queued_at: trx.fn.now() as unknown as Date }).returning('*');
}

/**
 * Deliveries whose job is not queued yet, oldest first, locked (others skip them) until the
 * transaction marks them queued.
 */
export async function claimUnqueuedDeliveries(trx: Knex.Transaction, limit: number): Promise<string[]> {
  const rows = await WebhookDeliveryRow.query(trx).whereNull('queued_at').orderBy('created_at').limit(limit).forUpdate().skipLocked().select('id');
  return rows.map((row) => row.id);
}

export async function markQueued(trx: Knex.Transaction, ids: string[]): Promise<void> {
  await WebhookDeliveryRow.query(trx).whereIn('id', ids).patch({ queued_at: trx.fn.now() as unknown as Date });
}

/** A delivery with its endpoint, the delivery's row locked until the transaction ends. */
export async function lockDelivery(trx: Knex.Transaction, id: string): Promise<WebhookDeliveryRow | undefined> {
  return WebhookDeliveryRow.query(trx).findById(id).forUpdate();
}

export async function findDelivery(db: Db, id: string): Promise<WebhookDeliveryRow | undefined> {
  return WebhookDeliveryRow.query(db).findById(id);
}

/**
 * An endpoint; with `lock`, its row locked FOR NO KEY UPDATE until the transaction ends (which does
 * not wait for, nor block, the inserts of attempts and deliveries that reference it).
 */
export async function findEndpoint(db: Db, id: string, options: { lock?: boolean } = {}): Promise<WebhookEndpointRow | undefined> {
  const query = WebhookEndpointRow.query(db).findById(id);
  return options.lock ? query.forNoKeyUpdate() : query;
}

/** Records one attempt and its delivery's state after it. */
export async function recordAttempt(
  trx: Knex.Transaction,
  attempt: Pick<WebhookAttemptRow, 'delivery_id' | 'endpoint_id' | 'outcome' | 'response_status' | 'error' | 'duration_ms'>,
  final: boolean,
): Promise<void> {
  const delivery = await WebhookDeliveryRow.query(trx)
    .findById(attempt.delivery_id)
    .patch({
      attempts: trx.raw('attempts + 1') as unknown as number,
      last_error: attempt.error,
      ...(attempt.outcome === 'succeeded' ? { status: 'succeeded' as const, completed_at: trx.fn.now() as unknown as Date } : {}),
      ...(attempt.outcome === 'failed' && final ? { status: 'failed' as const, completed_at: trx.fn.now() as unknown as Date } : {}),
    })
    .returning('attempts')
    .first()
    .castTo<{ attempts: number } | undefined>();
  await WebhookAttemptRow.query(trx).insert({ ...attempt, attempt: delivery?.attempts ?? 1 });
}

/** A delivery that will not be attempted (its endpoint was disabled meanwhile). */
export async function abandonDelivery(db: Db, id: string, reason: string): Promise<void> {
  await WebhookDeliveryRow.query(db).findById(id).where({ status: 'pending' }).patch({ status: 'failed', last_error: reason, completed_at: db.fn.now() as unknown as Date });
}

/** Deletes up to `limit` deliveries (their attempts with them) completed before `before`; how many. */
export async function pruneDeliveries(db: Db, before: Date, limit: number): Promise<number> {
  const { rowCount } = await db.raw<{ rowCount: number }>(
    'delete from webhook_deliveries where id in (select id from webhook_deliveries where completed_at < ? limit ?)',
    [before, limit],
  );
  return rowCount;
}

// ---- attempts as the API lists them

export interface AttemptView {
  id: string;
  delivery_id: string;
  event_type: WebhookDeliveryRow['event_type'];
  event_id: string | null;
  attempt: number;
  outcome: WebhookAttemptRow['outcome'];
  response_status: number | null;
  error: string | null;
  duration_ms: number;
  created_at: Date;
}

/**
 * A page of the endpoint's attempts, newest first, and how many there are: the endpoint's counter in
 * `webhook_attempt_counts` (kept by triggers, migration 20261126000100), not a count of the rows.
 */
export async function listAttemptsOf(db: Db, endpointId: string, page: { limit: number; offset: number }): Promise<{ rows: AttemptView[]; total: number }> {
  const [rows, total] = await Promise.all([
    WebhookAttemptRow.query(db)
      .alias('a')
      .join('webhook_deliveries as d', 'd.id', 'a.delivery_id')
      .where('a.endpoint_id', endpointId)
      .orderBy('a.id', 'desc')
      .limit(page.limit)
      .offset(page.offset)
      .select('a.id', 'a.delivery_id', 'd.event_type', 'd.event_id', 'a.attempt', 'a.outcome', 'a.response_status', 'a.error', 'a.duration_ms', 'a.created_at')
      .castTo<AttemptView[]>(),
    db('webhook_attempt_counts').where({ endpoint_id: endpointId }).first<{ attempts: string } | undefined>('attempts'),
  ]);
  return { rows, total: Number(total?.attempts ?? 0) };
}
