import type { Knex } from 'knex';
import { UsageReportRow } from '../db/models/usage-reports.ts';
import type { MeterName } from './payment-processor.ts';

type Db = Knex | Knex.Transaction;

/**
 * The billing account (`b`) has a subscription that invoices its meters: Stripe bills metered usage
 * through a subscription item in its period, and `past_due` still invoices.
 */
const LIVE_SUBSCRIPTION = "(b.processor_subscription_id is not null and b.subscription_status in ('active', 'trialing', 'past_due'))";

/** How long after a period's end its unreported usage raises an alert (its invoice is finalized an hour after). */
const LATE_FOR_INVOICE = "interval '30 minutes'";

/**
 * Where each meter's usage lives: its table and the columns of its key, its rows joined with their
 * price (`p`), the condition of a row the meter bills, and when the usage happened.
 */
const SOURCES: Record<MeterName, { table: string; key: readonly string[]; from: string; billable: string; at: string }> = {
  gpu_instance_seconds: {
    table: 'gpu_usage_intervals',
    key: ['id'],
    from: 'gpu_usage_intervals u join prices p using (service_key)',
    billable: 'true',
    // Its last second (an interval ending on a period's bound belongs to the period before it).
    at: "u.ended_at - interval '1 second'",
  },
  hosted_tokens: {
    table: 'usage_records',
    // Its primary key (the table is partitioned by month of created_at; id is not indexed alone).
    key: ['usage_id', 'created_at'],
    // The usage the summary prices as hosted tokens (src/billing/billing.repository.ts, usageTotals).
    from: "usage_records u join prices p on p.resource_kind = 'hosted_model' and p.instance_type = u.model",
    billable: "u.deployment_id is null and u.unit = 'token' and u.quantity > 0",
    at: 'u.created_at',
  },
};

/** The condition of a row of the meter's usage not claimed by a report yet. */
const unclaimed = (meter: MeterName) => `u.usage_report_id is null and ${SOURCES[meter].billable}`;

export interface DueOrganization {
  organization_id: number;
  customer_id: string;
}


/** The meters usage is reported to, in the order a run reports them. */
export const METERS = Object.keys(SOURCES) as MeterName[];

/**
 * Opens one `no_subscription` anomaly per organization and meter whose customer has no live
 * subscription and whose usage waits unclaimed (it stays open until that usage is reported).
 */
export async function holdUnsubscribedUsage(db: Db, meter: MeterName): Promise<void> {
  const source = SOURCES[meter];
  await db.raw(
    `insert into usage_anomalies (organization_id, meter, kind, detail, usage_at)
     select u.organization_id, :meter, 'no_subscription',
            'Usage waits unreported: the organization has a payment processor customer but no live subscription to invoice it.', min(${source.at})
     from ${source.from} join billing_accounts b on b.organization_id = u.organization_id
     where ${unclaimed(meter)} and b.processor_customer_id is not null and not ${LIVE_SUBSCRIPTION}
     group by u.organization_id
     on conflict (organization_id, meter) where kind = 'no_subscription' and resolved_at is null do nothing`,
    { meter },
  );
}

/** Per organization, the usage of the meter from an ended billing period still unreported half an hour after its end. */
export async function usageLateForInvoice(db: Db, meter: MeterName): Promise<Array<{ organization_id: number; period_end: Date; oldest: Date; amount: string }>> {
  const source = SOURCES[meter];
  const { rows } = await db.raw<{ rows: Array<{ organization_id: number; period_end: Date; oldest: Date; amount: string }> }>(
    `select u.organization_id, b.current_period_start as period_end, min(${source.at}) as oldest, sum(u.quantity * p.unit_amount_decimal)::text as amount
     from ${source.from} join billing_accounts b on b.organization_id = u.organization_id
     where u.reported_at is null and ${source.billable}
       and ${source.at} < b.current_period_start and now() >= b.current_period_start + ${LATE_FOR_INVOICE}
     group by u.organization_id, b.current_period_start`,
  );
  return rows;
}

/** Organizations with unclaimed usage of the meter, a live subscription and no unsent report (at most `limit`). */
export async function dueOrganizations(db: Db, meter: MeterName, limit: number): Promise<DueOrganization[]> {
  const source = SOURCES[meter];
  const { rows } = await db.raw<{ rows: DueOrganization[] }>(
    `select distinct u.organization_id, b.processor_customer_id as customer_id
     from ${source.from} join billing_accounts b on b.organization_id = u.organization_id
     where ${unclaimed(meter)} and b.processor_customer_id is not null and ${LIVE_SUBSCRIPTION}
       and not exists (select 1 from usage_reports r where r.organization_id = u.organization_id and r.meter = :meter and r.reported_at is null)
     limit :limit`,
    { meter, limit },
  );
  return rows;
}

/** Serializes the claims of one organization and meter until the transaction ends. */
export async function lockClaimsOf(trx: Knex.Transaction, meter: MeterName, organizationId: number): Promise<void> {
  await trx.raw('select pg_advisory_xact_lock(hashtext(?), ?)', [`usage-report:${meter}`, organizationId]);
}

export async function hasUnsentReport(db: Db, meter: MeterName, organizationId: number): Promise<boolean> {
  return Boolean(await UsageReportRow.query(db).where({ organization_id: organizationId, meter }).whereNull('reported_at').first());
}

/** When the organization's oldest unclaimed usage of the meter happened; undefined when nothing is unclaimed. */
export async function oldestUnclaimedAt(db: Db, meter: MeterName, organizationId: number): Promise<Date | undefined> {
  const source = SOURCES[meter];
  const { rows } = await db.raw<{ rows: Array<{ at: Date | null }> }>(`select min(${source.at}) as at from ${source.from} where u.organization_id = ? and ${unclaimed(meter)}`, [
    organizationId,
  ]);
  return rows[0]?.at ?? undefined;
}

/**
 * In one statement: takes up to `limit` unclaimed rows of the meter's usage between `from` and `to`,
 * inserts a report with their exact amount (and the cumulative amount and value in millionths, from
 * the organization's previous report), stamped with their latest usage, and marks them with it.
 */
export async function claimUsage(
  trx: Knex.Transaction,
  claim: { meter: MeterName; organizationId: number; customerId: string; from: Date | string; to: Date | string; limit: number; installation: string },
): Promise<void> {
  const source = SOURCES[claim.meter];
  await trx.raw(
    `with claimed as (
       select ${source.key.map((column) => `u.${column}`).join(', ')}, u.quantity, u.quantity * p.unit_amount_decimal as amount, ${source.at} as usage_at
       from ${source.from}
       where u.organization_id = :organization and ${unclaimed(claim.meter)}
         and ${source.at} >= cast(:from as timestamptz) and ${source.at} < cast(:to as timestamptz)
       order by u.id limit :limit
     ), totals as (
       select sum(quantity) as quantity, sum(amount) as amount, max(usage_at) as usage_at from claimed having count(*) > 0
     ), previous as (
       select coalesce(max(cumulative_amount), 0) as amount, coalesce(max(cumulative_micros), 0) as micros
       from (select cumulative_amount, cumulative_micros from usage_reports
             where organization_id = :organization and meter = :meter order by id desc limit 1) latest
     ), report as (
       insert into usage_reports (organization_id, meter, customer_id, quantity, amount, cumulative_amount, cumulative_micros, value, usage_at, identifier)
       select :organization, :meter, :customer, t.quantity, t.amount, running.amount, running.micros, running.micros - p.micros, t.usage_at,
              :installation || '-' || gen_random_uuid()
       from totals t cross join previous p
       cross join lateral (select p.amount + t.amount as amount, floor((p.amount + t.amount) * 1000000)::bigint as micros) running
       returning id
     )
     update ${source.table} set usage_report_id = (select id from report) where (${source.key.join(', ')}) in (select ${source.key.join(', ')} from claimed)`,
    { organization: claim.organizationId, meter: claim.meter, customer: claim.customerId, limit: claim.limit, installation: claim.installation, from: claim.from, to: claim.to },
  );
}

/** The meter's reports not marked sent, oldest first. */
export async function unsentReports(db: Db, meter: MeterName): Promise<UsageReportRow[]> {
  return UsageReportRow.query(db).where({ meter }).whereNull('reported_at').orderBy('id');
}

/** Records the report's first send (kept if there was one): when that was, and the database's time now. */
export async function markFirstSent(db: Db, reportId: UsageReportRow['id']): Promise<{ firstSentAt: Date; now: Date }> {
  const { rows } = await db.raw<{ rows: Array<{ first_sent_at: Date; now: Date }> }>(
    'update usage_reports set first_sent_at = coalesce(first_sent_at, now()) where id = ? returning first_sent_at, now() as now',
    [reportId],
  );
  const row = rows[0] as { first_sent_at: Date; now: Date };
  return { firstSentAt: row.first_sent_at, now: row.now };
}

/** The value of the customer's reports of the meter marked sent, stamped in [start, end). */
export async function sentValueBetween(db: Db, report: Pick<UsageReportRow, 'organization_id' | 'meter' | 'customer_id'>, start: Date, end: Date): Promise<number> {
  const row = (await db('usage_reports')
    .where({ organization_id: report.organization_id, meter: report.meter, customer_id: report.customer_id })
    .whereNotNull('reported_at')
    .where('usage_at', '>=', start)
    .where('usage_at', '<', end)
    .sum({ value: 'value' })
    .first()) as { value: string | null } | undefined;
  return Number(row?.value ?? 0);
}

/** Marks the report sent, with the usage rows it claimed, and resolves the organization's open report anomalies of the meter. */
export async function markReportSent(db: Knex, report: Pick<UsageReportRow, 'id' | 'organization_id' | 'meter'>): Promise<void> {
  await db.transaction(async (trx) => {
    await UsageReportRow.query(trx).findById(report.id).whereNull('reported_at').patch({ reported_at: trx.fn.now() as unknown as Date });
    await trx(SOURCES[report.meter].table).where({ usage_report_id: report.id }).update({ reported_at: trx.fn.now() });
    await trx('usage_anomalies')
      .where({ organization_id: report.organization_id, meter: report.meter })
      .whereIn('kind', ['report_failed', 'no_subscription'])
      .whereNull('gpu_usage_interval_id')
      .whereNull('resolved_at')
      .update({ resolved_at: trx.fn.now() });
  });
}

/** Opens (or updates) the organization's `report_failed` anomaly of the meter. */
export async function openReportFailedAnomaly(db: Db, report: Pick<UsageReportRow, 'organization_id' | 'meter' | 'usage_at'>, detail: string): Promise<void> {
  await db.raw(
    `insert into usage_anomalies (organization_id, meter, kind, detail, usage_at) values (?, ?, 'report_failed', ?, ?)
     on conflict (organization_id, meter) where kind = 'report_failed' and resolved_at is null and gpu_usage_interval_id is null
     do update set detail = excluded.detail`,
    [report.organization_id, report.meter, detail.slice(0, 500), report.usage_at],
  );
}

/**
 * Marks the report the processor refused after accepting it (a meter error report) and opens the
 * organization's `meter_error` anomaly of its meter, together: false when no report has the identifier.
 */
export async function recordMeterError(db: Knex, identifier: string, detail: string): Promise<boolean> {
  return db.transaction(async (trx) => {
    const [report] = await trx('usage_reports').where({ identifier }).update({ processor_error: detail }).returning(['organization_id', 'meter', 'usage_at']);
    if (!report) return false;
    await trx.raw(
      `insert into usage_anomalies (organization_id, meter, kind, detail, usage_at) values (?, ?, 'meter_error', ?, ?)
       on conflict (organization_id, meter) where kind = 'meter_error' and resolved_at is null do update set detail = excluded.detail`,
      [report.organization_id, report.meter, `The payment processor refused usage report ${identifier} after accepting it (${detail}); it was not counted.`.slice(0, 500), report.usage_at],
    );
    return true;
  });
}
