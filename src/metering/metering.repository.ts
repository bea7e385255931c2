import type { Knex } from 'knex';
import { BillingAccountRow } from '../db/models/billing-accounts.ts';
import { DeploymentReplicaRow } from '../db/models/deployment-replicas.ts';
import { DeploymentRow } from '../db/models/deployments.ts';
import { GpuUsageIntervalRow } from '../db/models/gpu-usage-intervals.ts';
import { PriceRow } from '../db/models/prices.ts';
import { UsageAnomalyRow } from '../db/models/usage-anomalies.ts';
import { preparedRows } from '../db/query.ts';
import type { ServiceDimensions } from './service-keys.ts';

/** Every query of metering: prices, GPU seconds, the billing period and the usage totals. */
type Db = Knex | Knex.Transaction;

/** What the usage summary reads of the billing account: its period and currency. */
export async function findAccountPeriod(db: Db, organizationId: number): Promise<Pick<BillingAccountRow, 'current_period_start' | 'current_period_end' | 'currency'> | undefined> {
  return BillingAccountRow.query(db).where({ organization_id: organizationId }).select('current_period_start', 'current_period_end', 'currency').first();
}

export async function listPrices(db: Db): Promise<PriceRow[]> {
  return PriceRow.query(db).orderBy([{ column: 'meter' }, { column: 'service_key' }]);
}

/** Dollars per token of each hosted model, from the price table. */
export async function hostedTokenPrices(db: Db): Promise<Map<string, number>> {
  const rows = await PriceRow.query(db).where({ resource_kind: 'hosted_model' }).select('instance_type', 'unit_amount_decimal');
  return new Map(rows.map((row) => [row.instance_type, Number(row.unit_amount_decimal)]));
}

export async function findPrice(db: Db, serviceKey: string): Promise<PriceRow | undefined> {
  return PriceRow.query(db).findOne({ service_key: serviceKey });
}

/** Sets the price of a service, adding the service when it has none yet. */
export async function upsertPrice(db: Db, dimensions: ServiceDimensions, unitAmountDecimal: string): Promise<PriceRow> {
  return PriceRow.query(db).insert({ ...dimensions, unit_amount_decimal: unitAmountDecimal }).onConflict('service_key').merge(['unit_amount_decimal']).returning('*');
}

/**
 * Gives each service a cluster's instances sell on 1, 2, 4 or 8 GPUs (what instance selection
 * allocates) a price row at its list price, keeping the prices already set. Prices are in US dollars
 * only (the meters report dollars): a list price in another currency gets no price row.
 */
export async function addClusterGpuPrices(db: Db, clusterId: string): Promise<void> {
  await db.raw(
    `insert into prices (provider, region, resource_kind, instance_type, gpu_type, gpu_count, unit_amount_decimal, currency)
     select provider, region, resource_kind, instance_type, gpu_type, gpu_count_text, list_unit_amount, currency
     from gpu_services where cluster_id = ? and gpu_count in (1, 2, 4, 8) and currency = 'usd'
     on conflict (service_key) do nothing`,
    [clusterId],
  );
}

// ---- GPU seconds

/** A replica's metering columns. */
export type MeteredReplica = Pick<DeploymentReplicaRow, 'id' | 'running_since' | 'running_until' | 'accrued_until' | 'gpu_service_key'>;

/**
 * A replica with GPU seconds still to be closed: one serving, or one that stopped serving since its
 * last interval. `metering_open` is that condition stored as a column (generated from `running_since`,
 * `running_until` and `accrued_until`, migration 20261204000100): it is the predicate of the partial
 * indexes the meter and the usage summary read (`deployment_replicas_gpu_metering`,
 * `deployment_replicas_metered_by_organization`), and its statistics give the planner the number of
 * open replicas, which it could not estimate from the condition on the three columns.
 */
const SECONDS_TO_CLOSE = 'metering_open';

/**
 * Deployments with GPU seconds still to be closed: those with a replica serving, or one that
 * stopped serving since its last interval.
 */
export async function findGpuMeteringDue(db: Db): Promise<string[]> {
  const rows = await DeploymentReplicaRow.query(db).whereRaw(SECONDS_TO_CLOSE).distinct('deployment_id');
  return rows.map((row) => row.deployment_id);
}

/**
 * The deployment's organization, its row locked until the transaction ends (one accrual at a time,
 * and no status change of its replicas in between), and the metering columns of its replicas with
 * seconds still to be closed, locked after it (the deployment's row first, then its replicas).
 */
export async function lockMeteredReplicas(trx: Knex.Transaction, deploymentId: string): Promise<{ organizationId: number; replicas: MeteredReplica[] } | undefined> {
  const deployment = await DeploymentRow.query(trx).findById(deploymentId).forUpdate().select('organization_id');
  if (!deployment) return undefined;
  const replicas = await DeploymentReplicaRow.query(trx)
    .where({ deployment_id: deploymentId })
    .whereRaw(SECONDS_TO_CLOSE)
    .orderBy('ordinal')
    .forUpdate()
    .select('id', 'running_since', 'running_until', 'accrued_until', 'gpu_service_key');
  return { organizationId: deployment.organization_id, replicas };
}

/** The database clock, truncated to the second, as it is now (not when the transaction began). */
export async function currentSecond(db: Db): Promise<Date> {
  const { rows } = await db.raw<{ rows: [{ now: Date }] }>("select date_trunc('second', clock_timestamp()) as now");
  return rows[0].now;
}

/**
 * The service key of the replica's GPUs, adding its price row at the list price when it has none;
 * undefined for a replica without GPUs placed.
 */
export async function gpuServiceKeyOf(trx: Knex.Transaction, replicaId: string): Promise<string | undefined> {
  await trx.raw(
    `insert into prices (provider, region, resource_kind, instance_type, gpu_type, gpu_count, unit_amount_decimal, currency)
     select provider, region, resource_kind, instance_type, gpu_type, gpu_count_text, list_unit_amount, currency
     from deployment_gpu_services where replica_id = ? and service_key is null
     on conflict (service_key) do nothing`,
    [replicaId],
  );
  // A new statement: it sees the row whether this transaction or a concurrent one added it.
  const { rows } = await trx.raw<{ rows: Array<{ service_key: string }> }>('select service_key from deployment_gpu_services where replica_id = ?', [replicaId]);
  return rows[0]?.service_key ?? undefined;
}

/**
 * Stores a closed interval. The caller holds the deployment's lock and starts where the replica's
 * last one ended, so a second interval at the same second or an overlap is a bug: the table refuses it.
 */
export async function insertGpuInterval(
  trx: Knex.Transaction,
  interval: Pick<GpuUsageIntervalRow, 'deployment_id' | 'replica_id' | 'organization_id' | 'service_key' | 'started_at' | 'ended_at'>,
): Promise<void> {
  await GpuUsageIntervalRow.query(trx).insert(interval);
}

/**
 * The bounds of the organization's billing period as its account knows them (the subscription's
 * current period start and end), sorted; none without a subscription period. Usage on either side
 * of a bound belongs to different invoices.
 */
export async function billingPeriodBounds(db: Db, organizationId: number): Promise<Date[]> {
  const account = await BillingAccountRow.query(db).findOne({ organization_id: organizationId }).select('current_period_start', 'current_period_end');
  return [account?.current_period_start, account?.current_period_end].filter((bound): bound is Date => bound instanceof Date).sort((a, b) => a.getTime() - b.getTime());
}

/** Records how far the replica's GPU seconds are closed, and the service they are priced as when given. */
export async function recordAccruedUntil(trx: Knex.Transaction, replicaId: string, until: Date, serviceKey?: string): Promise<void> {
  await DeploymentReplicaRow.query(trx)
    .findById(replicaId)
    .patch({ accrued_until: until, ...(serviceKey ? { gpu_service_key: serviceKey } : {}) });
}

// ---- the usage summary

/** A half-open time range `[start, end)`. */
export interface Period {
  start: Date;
  end: Date;
}

/** One priced service's usage in a period, amounts as Postgres renders its exact numerics. */
export type UsageTotalRow = Pick<
  PriceRow,
  'service_key' | 'meter' | 'unit' | 'display_name' | 'provider' | 'region' | 'resource_kind' | 'instance_type' | 'gpu_type' | 'gpu_count' | 'currency'
> & { total_quantity: string; unit_amount_decimal: string; estimated_amount: string; exact_amount: string };

const HOUR_MS = 3_600_000;

/**
 * The organization's usage in `period`, per priced service, in exact numeric: GPU seconds (closed
 * intervals, and the seconds of serving replicas up to `now`, clipped to the period) and hosted-model tokens. The
 * estimated amount is rounded to the cent, the exact one not (an invoice rounds once per meter line).
 * Whole hours come from the rollups and their unfolded deltas, only the edge hours from raw rows, so
 * a call's cost does not grow with usage; prepared, since planning it took longer than running it
 * (docs/billing.md, Usage at scale; docs/performance.md, Data at scale).
 */
export async function usageTotals(db: Db, organizationId: number, period: Period, now: Date): Promise<UsageTotalRow[]> {
  return preparedRows<UsageTotalRow>(db, 'usage-totals', usageTotalsQuery(db, organizationId, period, now));
}

/** The statement `usageTotals` prepares, with its parameters. */
export function usageTotalsQuery(db: Db, organizationId: number, period: Period, now: Date): Knex.Raw {
  const { hours, edges } = splitByHours(period);
  return db.raw(USAGE_TOTALS, {
    organization: organizationId,
    start: period.start,
    end: period.end,
    now,
    hoursStart: hours.start,
    hoursEnd: hours.end,
    firstEdgeStart: edges[0].start,
    firstEdgeEnd: edges[0].end,
    lastEdgeStart: edges[1].start,
    lastEdgeEnd: edges[1].end,
  });
}

const USAGE_TOTALS = `with rolled_up as (
       select meter, item, sum(quantity) as quantity
       from (select meter, item, quantity from usage_rollups
             where organization_id = :organization and hour >= :hoursStart and hour < :hoursEnd
             union all
             select meter, item, quantity from usage_rollup_deltas
             where organization_id = :organization and hour >= :hoursStart and hour < :hoursEnd) hours
       group by meter, item
     ), used (service_key, quantity) as (
       select item, quantity from rolled_up where meter = 'gpu_instance_seconds'
       union all
       select p.service_key, r.quantity
       from rolled_up r join prices p on p.resource_kind = 'hosted_model' and p.instance_type = r.item
       where r.meter = 'hosted_tokens'
       union all
       ${edgeUsage('firstEdge')}
       union all
       ${edgeUsage('lastEdge')}
       union all
       select r.gpu_service_key,
              extract(epoch from least(coalesce(r.running_until, :now), :end) - greatest(coalesce(r.accrued_until, r.running_since), :start))::bigint
       from deployment_replicas r
       -- The key stored when it became ready (or by the meter's first accrual, when its price row was
       -- made then): looking each replica's allocation up through deployment_gpu_services cost 6 to 9
       -- ms of planning and 13 ms for 800 running deployments. A replica without a key finds no price
       -- below and drops out there; saying gpu_service_key is not null here as well made the planner
       -- multiply its rarity (replicas closed before keys were stored have none) by the open ones' and
       -- expect a handful of rows, then join the prices by nested loop (8.5 ms instead of about 2 for
       -- an organization with 900 open replicas among 200,000, docs/performance.md).
       where r.organization_id = :organization and r.metering_open
         and least(coalesce(r.running_until, :now), :end) > greatest(coalesce(r.accrued_until, r.running_since), :start)
     )
     select p.service_key, p.meter, p.unit, p.display_name, p.provider, p.region, p.resource_kind, p.instance_type,
            p.gpu_type, p.gpu_count, p.currency, sum(used.quantity)::text as total_quantity,
            trim_scale(p.unit_amount_decimal)::text as unit_amount_decimal,
            round(sum(used.quantity) * p.unit_amount_decimal, 2)::text as estimated_amount,
            (sum(used.quantity) * p.unit_amount_decimal)::text as exact_amount
     from used join prices p using (service_key)
     group by p.id
     order by p.meter, p.service_key`;

/** Flagged usage of the organization in the period, not resolved yet. */
export async function countOpenAnomalies(db: Db, organizationId: number, period: Period): Promise<number> {
  return UsageAnomalyRow.query(db)
    .where({ organization_id: organizationId })
    .whereNull('resolved_at')
    .where('usage_at', '>=', period.start)
    .where('usage_at', '<', period.end)
    .resultSize();
}

/**
 * The usage of a partial hour at an edge of the period (`:<edge>Start` to `:<edge>End`, empty when
 * equal), from the raw rows: GPU seconds of the intervals overlapping it, clipped to it, and hosted
 * tokens recorded in it. Bounds as parameters of their own (not a join to a list of edges): the
 * planner then sees how short the range is, prunes partitions, and keeps the estimated cost low
 * (a cost in the hundreds of thousands, as a join made it, turned on JIT compilation for each call).
 */
function edgeUsage(edge: 'firstEdge' | 'lastEdge'): string {
  const [start, end] = [`:${edge}Start::timestamptz`, `:${edge}End::timestamptz`];
  return `select i.service_key, extract(epoch from least(i.ended_at, ${end}) - greatest(i.started_at, ${start}))::bigint
       from gpu_usage_intervals i
       where i.organization_id = :organization and tstzrange(i.started_at, i.ended_at) && tstzrange(${start}, ${end})
       union all
       select p.service_key, u.quantity
       from usage_records u
       join prices p on p.resource_kind = 'hosted_model' and p.instance_type = u.model
       where u.organization_id = :organization and u.deployment_id is null and u.unit = 'token'
         and u.created_at >= ${start} and u.created_at < ${end}`;
}

/**
 * A period as the whole hours (UTC) it contains and the partial hours before and after them; a
 * period within one hour is all edge. Empty ranges have `start >= end`.
 */
function splitByHours(period: Period): { hours: Period; edges: [Period, Period] } {
  const firstWholeHour = new Date(Math.ceil(period.start.getTime() / HOUR_MS) * HOUR_MS);
  const lastWholeHourEnd = new Date(Math.floor(period.end.getTime() / HOUR_MS) * HOUR_MS);
  if (firstWholeHour >= lastWholeHourEnd) return { hours: { start: period.start, end: period.start }, edges: [period, { start: period.end, end: period.end }] };
  return {
    hours: { start: firstWholeHour, end: lastWholeHourEnd },
    edges: [
      { start: period.start, end: firstWholeHour },
      { start: lastWholeHourEnd, end: period.end },
    ],
  };
}

// ---- the usage export

/** What the rows of a usage export are grouped by, besides the service (the summary's own grouping). */
export type UsageOwner = 'deployment' | 'api_key';

/** One row of a usage export: an owner's usage of one priced service, amounts as Postgres renders exact numerics. */
export interface UsageExportRow {
  /** The deployment's id or the API key's id, as text; null for usage with no such owner. */
  group_id: string | null;
  /** The deployment's model name or the API key's name. */
  group_name: string | null;
  /** The API key's prefix (`api_key` only). */
  key_prefix: string | null;
  meter: 'gpu_instance_seconds' | 'hosted_tokens';
  service_key: string;
  unit: string;
  quantity: string;
  unit_amount_decimal: string;
  /** quantity × unit price, exact, trailing zeros left out. */
  amount: string;
}

/** The owner's id and names, per grouping (fixed texts: no input reaches the SQL). */
const OWNERS: Record<UsageOwner, { column: string; select: string; join: string }> = {
  deployment: {
    column: 'deployment_id',
    select: 'g.deployment_id::text as group_id, d.model_name as group_name, null::text as key_prefix',
    join: 'left join deployments d on d.id = g.deployment_id',
  },
  api_key: {
    column: 'api_key_id',
    select: 'g.api_key_id::text as group_id, k.name as group_name, k.key_prefix',
    join: 'left join api_keys k on k.id = g.api_key_id',
  },
};

/**
 * The statement behind a usage export's rows grouped by owner, for a cursor: the organization's
 * usage in `period` per owner and priced service, from the raw rows the summary's rollups are made
 * of (the rollups keep no owner): GPU seconds of closed intervals clipped to the period, the seconds
 * of serving replicas not closed yet up to `now` (as the summary counts them), and hosted-model
 * tokens. Per service, its rows add up to the summary's quantity exactly: the same rows, the same
 * clipping. Ordered by meter, owner (none last) and service.
 */
export function usageExportRowsQuery(db: Db, organizationId: number, owner: UsageOwner, period: Period, now: Date): Knex.Raw {
  const { column, select, join } = OWNERS[owner];
  return db.raw(
    `with used (deployment_id, api_key_id, service_key, quantity) as (
       select i.deployment_id, null::integer, i.service_key,
              extract(epoch from least(i.ended_at, :end) - greatest(i.started_at, :start))::bigint
       from gpu_usage_intervals i
       where i.organization_id = :organization and tstzrange(i.started_at, i.ended_at) && tstzrange(:start, :end)
       union all
       select r.deployment_id, null::integer, r.gpu_service_key,
              extract(epoch from least(coalesce(r.running_until, :now), :end) - greatest(coalesce(r.accrued_until, r.running_since), :start))::bigint
       from deployment_replicas r
       -- A replica without a key drops out at the join to prices, as in the summary.
       where r.organization_id = :organization and r.metering_open
         and least(coalesce(r.running_until, :now), :end) > greatest(coalesce(r.accrued_until, r.running_since), :start)
       union all
       select null::uuid, u.api_key_id, p.service_key, u.quantity
       from usage_records u
       join prices p on p.resource_kind = 'hosted_model' and p.instance_type = u.model
       where u.organization_id = :organization and u.deployment_id is null and u.unit = 'token'
         and u.created_at >= :start and u.created_at < :end
     ), g as (
       select ${column}, service_key, sum(quantity) as quantity from used group by 1, 2
     )
     select ${select}, p.meter, p.service_key, p.unit, g.quantity::text as quantity,
            trim_scale(p.unit_amount_decimal)::text as unit_amount_decimal,
            trim_scale(g.quantity * p.unit_amount_decimal)::text as amount
     from g join prices p using (service_key)
     ${join}
     order by p.meter, g.${column} nulls last, p.service_key`,
    { organization: organizationId, start: period.start, end: period.end, now },
  );
}
