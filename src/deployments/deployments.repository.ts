import type { Knex } from 'knex';
import { bookGpus, lockGpuLedger, placementOptions, releaseAllocations, type PlacementOption } from '../clusters/gpu-ledger.ts';
import type { components } from '../../generated/api.d.ts';
import { DeploymentReplicaRow } from '../db/models/deployment-replicas.ts';
import { DeploymentRow } from '../db/models/deployments.ts';
import { isoTime, isoTimes, utcTextSql } from '../db/query.ts';
import { ACTIVE_STATUSES, maySoonServe, METERED_REPLICA_STATUSES, type DeploymentStatus, type ReplicaMove, type ReplicaStatus } from './deployment-states.ts';
import { isUuid } from '../validation.ts';
import type { Candidate } from './instance-selection.ts';

export type Deployment = components['schemas']['Deployment'];

/** Every query of the deployments area: deployments, their replicas and GPU allocations, and placement on instances. */
type Db = Knex | Knex.Transaction;

/** A user's deployments in one organization: what the API shows them. */
export interface Scope {
  userId: number;
  organizationId: number;
}

function deploymentsOf(db: Db, scope: Scope) {
  return DeploymentRow.query(db).where({ user_id: scope.userId, organization_id: scope.organizationId });
}

// ---- the API's side

/**
 * Where a keyset page starts: after the deployment with this creation time and id, in the list's
 * order (created_at desc, id desc). `createdAt` is ISO 8601 in UTC to the microsecond, as Postgres
 * stores it (a JavaScript Date would round it to the millisecond and skip or repeat rows).
 */
export interface ListPosition {
  createdAt: string;
  id: string;
}

/** A deployment's creation time as `ListPosition.createdAt` spells it. */
const POSITION_AT = `to_char(d.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/** The columns of a deployment the API shows besides its times. */
const SHOWN_COLUMNS = [
  'id',
  'user_id',
  'organization_id',
  'cluster_id',
  'instance_id',
  'gpu_allocation_id',
  'model_name',
  'model_format',
  'model_size_in_billions',
  'quantization',
  'engine_model_uid',
  'status',
  'selected_instance_type',
  'selection_reason',
  'failure_stage',
  'failure_reason',
  'min_replicas',
  'max_replicas',
  'target_concurrency',
  'scale_to_zero_after_seconds',
  'instance_type',
  'desired_replicas',
] as const satisfies ReadonlyArray<keyof DeploymentRow>;

/** How many of a deployment's replicas are in each status the API shows (`replicas` of a deployment). */
export interface ReplicaCounts {
  ready: number;
  starting: number;
  /** Draining or stopping: taking no new request, on their way out. */
  draining: number;
}

/** A deployment with none: what a new one has. */
export const NO_REPLICAS: ReplicaCounts = { ready: 0, starting: 0, draining: 0 };

/**
 * One aggregate over a deployment's replicas (under the alias `d`), read from the replicas' key
 * `(deployment_id, ordinal)`: the counts of `ReplicaCounts` as integer columns.
 */
const REPLICA_COUNTS_SQL = `select count(*) filter (where r.status = 'ready')::int as ready,
         count(*) filter (where r.status = 'starting')::int as starting,
         count(*) filter (where r.status in ('draining', 'stopping'))::int as draining
  from deployment_replicas r where r.deployment_id = d.id`;

/** A deployment as a page lists it: what the API shows, its times as the API writes them, and its replicas' counts. */
export type ListedDeployment = Pick<DeploymentRow, (typeof SHOWN_COLUMNS)[number]> & { created_at: string; updated_at: string; terminated_at: string | null } & ReplicaCounts;
const LISTED_TIMES = ['created_at', 'updated_at', 'terminated_at'] as const satisfies ReadonlyArray<keyof ListedDeployment>;

/**
 * From this `offset` on, a page by offset starts from the owner's day counts (`DAY_BUCKET_SQL`)
 * instead of stepping over `offset` entries of `deployments_by_owner`. Below it, stepping is already
 * cheap (1,000 entries take about 0.15 ms), while the day counts may read as many rows as the offset
 * (an owner with one deployment a day) besides the day's entries (docs/scaling.md, Deep pages).
 */
export const DAY_BUCKET_FROM_OFFSET = 1_000;

/**
 * The UTC day a page at offset `?` (the third binding; the first two the owner) starts in, and how
 * many of the owner's deployments are newer than that day (`before`): the newest-first day whose
 * running sum of `deployment_day_counts` first exceeds the offset. No row when the offset is past
 * the owner's last deployment. The counts are read newest first from their primary key and the
 * window stops at the first day that qualifies, so it reads the days from now back to the page.
 */
const DAY_BUCKET_SQL = `select day, through - deployments as before from (
    select day, deployments, sum(deployments) over (order by day desc rows between unbounded preceding and current row) as through
    from deployment_day_counts where user_id = ? and organization_id = ?
  ) days where through > ? order by day desc limit 1`;

/**
 * A page of the scope's deployments, newest first (created_at desc, id desc), the scope's total, and
 * the position after the page's last row when more follow (else null). A deferred join: the page's
 * ids from an index-only scan of `deployments_by_owner`, then only those rows by primary key, in
 * order; one row more than `limit` says whether another page follows. The replicas' counts are one
 * correlated aggregate per row of the page (a lateral join on the replicas' key), never a join of the
 * whole list. `total` is the owner's counter in `deployment_counts`, not a count (docs/scaling.md,
 * Indexes that keep reads cheap).
 *
 * An offset of at least `DAY_BUCKET_FROM_OFFSET` does not step over `offset` index entries: the same
 * statement (one snapshot, so the counts match the rows it reads) first finds the UTC day the page
 * starts in from `deployment_day_counts` (kept by triggers in every write's transaction, migration
 * `20261204000300_deployment_day_counts`) and how many deployments are newer (`before`), then scans
 * `deployments_by_owner` from that day's end (`created_at < (day + 1)::timestamp at time zone 'UTC'`,
 * an index condition), skipping `offset - before`: O(the owner's days + one day's deployments +
 * limit) instead of O(offset). The day is the UTC date of `created_at` on both sides, whatever the
 * session's TimeZone. Past the end no day qualifies: the bound is null and the page empty.
 */
export async function listDeploymentsOf(
  db: Db,
  scope: Scope,
  page: { limit: number; offset: number; after?: ListPosition },
): Promise<{ rows: ListedDeployment[]; total: number; next: ListPosition | null }> {
  const ids = db('deployments')
    .where({ user_id: scope.userId, organization_id: scope.organizationId })
    .select('id', 'created_at')
    .orderBy([
      { column: 'created_at', order: 'desc' },
      { column: 'id', order: 'desc' },
    ])
    .limit(page.limit + 1);
  const byDay = !page.after && page.offset >= DAY_BUCKET_FROM_OFFSET;
  if (byDay) {
    // knex compiles a raw OFFSET (its types admit only a number).
    const skip = db.raw('(select ?::bigint - before from bucket)', [page.offset]) as unknown as number;
    ids.whereRaw(`created_at < (select (day + 1)::timestamp at time zone 'UTC' from bucket)`).offset(skip);
  } else {
    ids.offset(page.offset);
  }
  if (page.after) ids.whereRaw('(created_at, id) < (?::timestamptz, ?::uuid)', [page.after.createdAt, page.after.id]);
  // Plain rows of the shown columns, times read as UTC text: parsing every time column into a
  // Date (and back, for the shown ones) was a fifth of the service's work for a page.
  const pageQuery = db('deployments as d')
    .join(ids.as('page'), 'page.id', 'd.id')
    .joinRaw(`cross join lateral (${REPLICA_COUNTS_SQL}) as replicas`)
    .select(
      ...SHOWN_COLUMNS.map((column) => `d.${column}`),
      'replicas.ready',
      'replicas.starting',
      'replicas.draining',
      ...LISTED_TIMES.map((column) => db.raw(utcTextSql(`d.${column}`, column))),
      db.raw(`${POSITION_AT} as position_at`),
    )
    .orderBy([
      { column: 'page.created_at', order: 'desc' },
      { column: 'page.id', order: 'desc' },
    ]);
  if (byDay) pageQuery.with('bucket', db.raw(DAY_BUCKET_SQL, [scope.userId, scope.organizationId, page.offset]));
  const [found, counted] = await Promise.all([
    pageQuery as Promise<Array<ListedDeployment & { position_at: string }>>,
    db('deployment_counts').where({ user_id: scope.userId, organization_id: scope.organizationId }).first<{ deployments: string } | undefined>('deployments'),
  ]);
  const rows = isoTimes(found.slice(0, page.limit), LISTED_TIMES);
  const last = rows.at(-1);
  const next = found.length > page.limit && last ? { createdAt: last.position_at, id: last.id } : null;
  for (const row of rows) delete (row as Partial<typeof row>).position_at;
  return { rows, total: Number(counted?.deployments ?? 0), next };
}

/** One deployment of the scope (undefined for an id that is not a UUID); locked when asked. */
export async function findDeploymentOf(db: Db, scope: Scope, id: string, options: { forUpdate?: boolean } = {}): Promise<DeploymentRow | undefined> {
  if (!isUuid(id)) return undefined;
  const query = deploymentsOf(db, scope).where({ id });
  return options.forUpdate ? query.forUpdate().first() : query.first();
}

/** The replicas' counts of one deployment (one aggregate on the replicas' key). */
export async function replicaCountsOf(db: Db, deploymentId: string): Promise<ReplicaCounts> {
  const { rows } = await db.raw<{ rows: ReplicaCounts[] }>(`select counts.* from (select ?::uuid as id) d cross join lateral (${REPLICA_COUNTS_SQL}) counts`, [deploymentId]);
  return rows[0] ?? NO_REPLICAS;
}

/** The scaling settings a deployment stores (`deployments` columns, as the API names them). */
export type ScalingColumns = Pick<DeploymentRow, 'min_replicas' | 'max_replicas' | 'target_concurrency' | 'scale_to_zero_after_seconds'>;

/** Writes a locked deployment's scaling settings and desired replicas. */
export async function updateScaling(trx: Knex.Transaction, id: string, changes: ScalingColumns & Pick<DeploymentRow, 'desired_replicas'>): Promise<void> {
  await DeploymentRow.query(trx).findById(id).patch(changes);
}

/** Stores a new deployment (`requested`). */
export async function insertDeploymentRow(trx: Knex.Transaction, deployment: NewDeployment): Promise<DeploymentRow> {
  return DeploymentRow.query(trx).insert(deployment).returning('*');
}

export type NewDeployment = Pick<
  DeploymentRow,
  'user_id' | 'organization_id' | 'deployable_model_id' | 'model_name' | 'model_format' | 'model_size_in_billions' | 'quantization' | 'model_engine'
> &
  Partial<ScalingColumns & Pick<DeploymentRow, 'instance_type' | 'desired_replicas'>>;

/** How many of the organization's deployments count against its limit. */
export async function countActiveDeployments(db: Db, organizationId: number): Promise<number> {
  return DeploymentRow.query(db).where({ organization_id: organizationId }).whereIn('status', ACTIVE_STATUSES).resultSize();
}

/** Hands a user's deployments in an organization to another user (the first leaves it). */
export async function transferDeployments(db: Db, move: { organizationId: number; fromUserId: number; toUserId: number }): Promise<void> {
  await DeploymentRow.query(db).where({ organization_id: move.organizationId, user_id: move.fromUserId }).patch({ user_id: move.toUserId });
}

// ---- provisioning's side

export async function findDeployment(db: Db, id: string, options: { forUpdate?: boolean } = {}): Promise<DeploymentRow | undefined> {
  const query = DeploymentRow.query(db).findById(id);
  return options.forUpdate ? query.forUpdate() : query;
}

/** Columns a transition may set besides the status. */
type TransitionChanges = Partial<
  Pick<
    DeploymentRow,
    | 'cluster_id'
    | 'instance_id'
    | 'gpu_allocation_id'
    | 'selected_instance_type'
    | 'selection_reason'
    | 'engine_model_uid'
    | 'failure_stage'
    | 'failure_reason'
    | 'engine_unhealthy_since'
  >
>;

export type StatusMove = { from: DeploymentStatus | readonly DeploymentStatus[]; to: DeploymentStatus; changes?: TransitionChanges };

/** Locks the deployment's row if it is in one of `statuses`: its status and organization, or undefined. */
export async function lockDeploymentIn(trx: Knex.Transaction, id: string, statuses: DeploymentStatus | readonly DeploymentStatus[]): Promise<Pick<DeploymentRow, 'status' | 'organization_id'> | undefined> {
  return DeploymentRow.query(trx)
    .findById(id)
    .whereIn('status', typeof statuses === 'string' ? [statuses] : statuses)
    .forNoKeyUpdate()
    .select('status', 'organization_id');
}

/**
 * Writes the move of a locked deployment to `to`, with `changes`. The time of the move is
 * `status_changed_at`, and also `terminated_at` for a move to `terminated`.
 */
export async function updateDeploymentStatus(trx: Knex.Transaction, id: string, move: StatusMove): Promise<void> {
  await DeploymentRow.query(trx)
    .findById(id)
    .patch({
      ...move.changes,
      status: move.to,
      status_changed_at: trx.fn.now(),
      ...(move.to === 'terminated' ? { terminated_at: trx.fn.now() } : {}),
    });
}

/** The deployment's status if it is one of these, its row locked until the transaction ends; else undefined. */
export async function lockInStatus(trx: Knex.Transaction, id: string, statuses: readonly DeploymentStatus[]): Promise<DeploymentStatus | undefined> {
  return (await DeploymentRow.query(trx).findById(id).whereIn('status', statuses).forUpdate().select('status'))?.status;
}

/** Deployments in these statuses that have not moved since `before`. */
export async function findUnmovedSince(db: Db, statuses: readonly DeploymentStatus[], before: Date): Promise<Array<Pick<DeploymentRow, 'id' | 'status'>>> {
  return DeploymentRow.query(db).whereIn('status', statuses).where('status_changed_at', '<=', before).select('id', 'status');
}

/** Failed deployments, failed since `before`, that still hold GPUs (their cleanup is due). */
export async function findFailedHoldingGpus(db: Db, before: Date): Promise<Array<Pick<DeploymentRow, 'id' | 'status'>>> {
  return DeploymentRow.query(db)
    .alias('d')
    .join('gpu_allocations as a', 'a.deployment_id', 'd.id')
    .where({ 'd.status': 'failed', 'a.status': 'active' })
    .where('d.status_changed_at', '<=', before)
    .select('d.id', 'd.status');
}

/** A deployment placed on a cluster, with the ids and engine uids of its replicas in `ready` (by ordinal). */
export type DeploymentWithReplicas = DeploymentRow & { replica_ids: string[]; replica_uids: string[] };

/** Deployments in `status` placed on a cluster that have replicas ready, each with their engine uids. */
export async function findWithReadyReplicas(db: Db, status: DeploymentStatus): Promise<DeploymentWithReplicas[]> {
  return DeploymentRow.query(db)
    .alias('d')
    .join('deployment_replicas as r', 'r.deployment_id', 'd.id')
    .where({ 'd.status': status, 'r.status': 'ready' })
    .whereNotNull('d.cluster_id')
    .groupBy('d.id')
    .select('d.*', db.raw('array_agg(r.id order by r.ordinal) as replica_ids'), db.raw('array_agg(r.engine_model_uid order by r.ordinal) as replica_uids'))
    .castTo<DeploymentWithReplicas[]>();
}

/**
 * Records when the engine began reporting a deployment in `status` not ready (kept from the first
 * report), or that it is ready again (`since` null).
 */
export async function recordEngineHealth(db: Db, id: string, status: DeploymentStatus, since: 'now' | null): Promise<void> {
  const query = DeploymentRow.query(db).findById(id).where({ status });
  if (since === 'now') await query.whereNull('engine_unhealthy_since').patch({ engine_unhealthy_since: db.fn.now() });
  else await query.patch({ engine_unhealthy_since: null });
}

// ---- GPU allocations and placement

export type { PlacementOption };

/**
 * The instances a deployment may be placed on (every dedicated cluster's), under the GPU ledger's
 * lock until the transaction ends: one allocation at a time, so no GPU is booked twice.
 */
export async function lockPlacementCandidates(trx: Knex.Transaction): Promise<PlacementOption[]> {
  await lockGpuLedger(trx);
  return placementOptions(trx, { dedicated: true });
}

/** The same instances as `lockPlacementCandidates`, read without the lock (a plan books nothing). */
export async function readPlacementCandidates(db: Db): Promise<PlacementOption[]> {
  return placementOptions(db, { dedicated: true });
}

/** A placement option as instance selection sees it. */
export function toCandidate(row: PlacementOption): Candidate {
  return {
    instanceId: row.id,
    clusterId: row.cluster_id,
    freeGpus: row.gpu_count - row.used_gpus,
    instanceType: {
      name: row.name,
      gpuType: row.gpu_type,
      gpuCount: row.gpu_count,
      gpuMemoryGb: row.gpu_memory_gb,
      pricePerSecond: Number(row.price_per_second),
    },
  };
}

/** What `gpu_count` GPUs of an instance are billed at, per second and as an hour and 30 days of them. */
export interface GpuServicePrice {
  instance_id: string;
  gpu_count: number;
  service_key: string;
  unit_amount_decimal: string;
  hourly_amount: string;
  thirty_day_amount: string;
  currency: string;
}

/**
 * The price GPU seconds on each (instance, GPU count) are billed at: the price table's for its
 * service (`gpu_services`), or the instance type's list price share when the service has none yet
 * (metering adds it at that price when the first interval closes). Exact numerics: an hour rounded
 * to a ten-thousandth, 30 days (2,592,000 seconds) to the cent, as the usage summary rounds.
 */
export async function gpuServicePrices(db: Db, services: ReadonlyArray<{ instanceId: string; gpuCount: number }>): Promise<GpuServicePrice[]> {
  if (services.length === 0) return [];
  const { rows } = await db.raw<{ rows: GpuServicePrice[] }>(
    `with unit as (${GPU_SERVICE_UNIT_SQL})
     select instance_id, gpu_count, service_key, currency,
            trim_scale(amount)::text as unit_amount_decimal,
            trim_scale(round(amount * 3600, 4))::text as hourly_amount,
            round(amount * 2592000, 2)::text as thirty_day_amount
     from unit`,
    [services.map((s) => s.instanceId), services.map((s) => s.gpuCount)],
  );
  return rows;
}

/** Each wanted (instance, GPU count) with its service key, and its price per second (`amount`) and currency. */
const GPU_SERVICE_UNIT_SQL = `
  select s.instance_id, s.gpu_count,
         s.provider || ':' || s.region || ':' || s.resource_kind || ':' || s.instance_type || ':' || s.gpu_type || ':' || s.gpu_count_text as service_key,
         coalesce(p.unit_amount_decimal, s.list_unit_amount) as amount, coalesce(p.currency, s.currency) as currency
  from gpu_services s
  join unnest(?::uuid[], ?::int[]) as wanted (instance_id, gpu_count) using (instance_id, gpu_count)
  left join prices p on (p.provider, p.region, p.resource_kind, p.instance_type, p.gpu_type, p.gpu_count)
    = (s.provider, s.region, s.resource_kind, s.instance_type, s.gpu_type, s.gpu_count_text)`;

/** What `replicas` replicas on one service cost: an hour and 30 days of them, rounded as `gpuServicePrices` rounds one. */
export interface ReplicaCost {
  replicas: number;
  hourly_amount: string;
  thirty_day_amount: string;
  currency: string;
}

/**
 * The cost of each count in `replicas` running on `gpuCount` GPUs of an instance: its price ×
 * replicas, an hour rounded to a ten-thousandth and 30 days to the cent, as one meter line rounds
 * (every replica's GPU seconds go to the same service). 0 replicas cost 0.
 */
export async function replicaCosts(db: Db, service: { instanceId: string; gpuCount: number }, replicas: readonly number[]): Promise<ReplicaCost[]> {
  const { rows } = await db.raw<{ rows: ReplicaCost[] }>(
    `with unit as (${GPU_SERVICE_UNIT_SQL})
     select n.replicas, unit.currency,
            trim_scale(round(unit.amount * n.replicas * 3600, 4))::text as hourly_amount,
            round(unit.amount * n.replicas * 2592000, 2)::text as thirty_day_amount
     from unit cross join unnest(?::int[]) with ordinality as n (replicas, position)
     order by n.position`,
    [[service.instanceId], [service.gpuCount], [...replicas]],
  );
  return rows;
}

/** Books GPUs of an instance for the deployment (under the ledger's lock); the allocation's id. */
export async function insertAllocation(db: Db, allocation: { deployment_id: string; instance_id: string; gpu_count: number }): Promise<string> {
  return bookGpus(db, { deploymentId: allocation.deployment_id }, allocation.instance_id, allocation.gpu_count);
}

/** What launching a placed deployment needs: the model's type besides the deployment's launch columns. */
export type PlacedDeployment = DeploymentRow & { model_type: string };

export async function findPlacedDeployment(db: Db, id: string): Promise<PlacedDeployment | undefined> {
  return DeploymentRow.query(db)
    .alias('d')
    .join('deployable_models as m', 'm.id', 'd.deployable_model_id')
    .where('d.id', id)
    .whereNotNull('d.cluster_id')
    .select('d.*', 'm.model_type')
    .first()
    .castTo<PlacedDeployment | undefined>();
}

// ---- replicas

/** A replica as launching it needs: its engine uid, its allocation's GPUs and the engine worker they are on. */
export type PlacedReplica = Pick<DeploymentReplicaRow, 'id' | 'ordinal' | 'engine_model_uid'> & { gpu_count: number; engine_worker: string };

/** Stores a new replica (`starting`) of a deployment, on the GPUs of its allocation. */
export async function insertReplica(
  trx: Knex.Transaction,
  replica: Pick<DeploymentReplicaRow, 'deployment_id' | 'organization_id' | 'ordinal' | 'engine_model_uid' | 'gpu_allocation_id'>,
): Promise<void> {
  await DeploymentReplicaRow.query(trx).insert(replica);
}

/** The deployment's replicas in one of `statuses` (all of them without), by ordinal. */
export async function findReplicasOf(db: Db, deploymentId: string, statuses?: readonly ReplicaStatus[]): Promise<DeploymentReplicaRow[]> {
  const query = DeploymentReplicaRow.query(db).where({ deployment_id: deploymentId }).orderBy('ordinal');
  return statuses ? query.whereIn('status', statuses) : query;
}

/** The deployment's replicas in `status`, with what launching them needs, by ordinal. */
export async function findPlacedReplicas(db: Db, deploymentId: string, status: ReplicaStatus): Promise<PlacedReplica[]> {
  return DeploymentReplicaRow.query(db)
    .alias('r')
    .join('gpu_allocations as a', 'a.id', 'r.gpu_allocation_id')
    .join('instances as i', 'i.id', 'a.instance_id')
    .where({ 'r.deployment_id': deploymentId, 'r.status': status })
    .orderBy('r.ordinal')
    .select('r.id', 'r.ordinal', 'r.engine_model_uid', 'a.gpu_count', 'i.engine_worker')
    .castTo<PlacedReplica[]>();
}

/**
 * Moves the deployment's replicas in one of `move.from` to `move.to` (the caller holds the
 * deployment's row lock: the deployment's row, then its replicas, then the ledger); the number moved.
 * The seconds a replica serves are recorded as GPU seconds are metered (src/metering/gpu-metering.ts):
 * entering `ready` writes `running_since` (and the price row's key of its GPUs, null when the service
 * has no price yet: the GPU meter makes one at the list price and stores it with its first accrual),
 * leaving `ready` or `draining` for good writes `running_until`. The clock is read when the row is
 * written, not when the transaction began: an accrual that locked the deployment first closed
 * seconds up to its own clock, and this update, run once that lock is released, never ends before
 * them. A move to `stopped` releases the replicas' GPUs in the ledger. `only`: these replicas (ids) alone.
 */
export async function moveReplicas(trx: Knex.Transaction, deploymentId: string, move: ReplicaMove, only?: readonly string[]): Promise<number> {
  const second = "date_trunc('second', clock_timestamp())";
  const leavesMetered = !METERED_REPLICA_STATUSES.includes(move.to);
  const replicas = DeploymentReplicaRow.query(trx).where({ deployment_id: deploymentId }).whereIn('status', move.from);
  if (only) replicas.whereIn('id', only);
  const moved = await replicas
    .patch({
      status: move.to,
      ...(move.to === 'ready'
        ? {
            ready_at: trx.fn.now(),
            running_since: trx.raw(second),
            gpu_service_key: trx.raw('(select s.service_key from deployment_gpu_services s where s.replica_id = deployment_replicas.id limit 1)'),
          }
        : {}),
      ...(leavesMetered ? { running_until: trx.raw(`case when status in (${METERED_REPLICA_STATUSES.map((status) => `'${status}'`).join(', ')}) then ${second} else running_until end`) } : {}),
      ...(move.to === 'draining' ? { draining_since: trx.fn.now() } : {}),
      ...(move.to === 'stopped' ? { stopped_at: trx.fn.now() } : {}),
    })
    .returning('gpu_allocation_id')
    .castTo<Array<Pick<DeploymentReplicaRow, 'gpu_allocation_id'>>>();
  if (move.to === 'stopped') await releaseAllocations(trx, moved.map((replica) => replica.gpu_allocation_id));
  return moved.length;
}

// ---- mapping

/** The deployment as the API shows it: a listed row carries its replicas' counts, a single row comes with them. */
export function toDeployment(row: ListedDeployment): Deployment;
export function toDeployment(row: DeploymentRow, replicas: ReplicaCounts): Deployment;
export function toDeployment(row: DeploymentRow | ListedDeployment, replicas: ReplicaCounts = row as ListedDeployment): Deployment {
  return {
    id: row.id,
    user_id: String(row.user_id),
    organization_id: String(row.organization_id),
    cluster_id: row.cluster_id,
    instance_id: row.instance_id,
    gpu_allocation_id: row.gpu_allocation_id,
    model_name: row.model_name,
    model_format: row.model_format,
    model_size_in_billions: Number(row.model_size_in_billions),
    quantization: row.quantization,
    engine_model_uid: row.engine_model_uid,
    status: row.status,
    selected_instance_type: row.selected_instance_type,
    selection_reason: row.selection_reason,
    failure_stage: row.failure_stage,
    failure_reason: row.failure_reason,
    min_replicas: row.min_replicas,
    max_replicas: row.max_replicas,
    target_concurrency: row.target_concurrency,
    scale_to_zero_after_seconds: row.scale_to_zero_after_seconds,
    instance_type: row.instance_type,
    // A deployment that will not serve again (failed, terminating, terminated) wants none.
    replicas: { desired: maySoonServe(row.status) ? row.desired_replicas : 0, ready: replicas.ready, starting: replicas.starting, draining: replicas.draining },
    created_at: isoTime(row.created_at),
    updated_at: isoTime(row.updated_at),
    terminated_at: row.terminated_at === null ? null : isoTime(row.terminated_at),
  };
}
