import type { Knex } from 'knex';
import type { MeterName } from './payment-processor.ts';

type Db = Knex | Knex.Transaction;

/** One day of a customer's meter where the processor's count differs from ours (millionths of a dollar). */
export interface UsageDifference {
  id: string;
  organization_id: number;
  customer_id: string;
  meter: MeterName;
  day: string;
  reported: string;
  at_processor: string;
  found_at: Date;
  checked_at: Date;
  resolved_at: Date | null;
  resolution: string | null;
}

/** Per organization, customer, meter and day (UTC), the value of the reports marked counted and not refused later. */
export async function countedReportsByDay(db: Db, start: Date, end: Date): Promise<Array<{ organization_id: number; customer_id: string; meter: MeterName; day: Date; value: string }>> {
  const { rows } = await db.raw<{ rows: Array<{ organization_id: number; customer_id: string; meter: MeterName; day: Date; value: string }> }>(
    `select organization_id, customer_id, meter, date_trunc('day', usage_at, 'UTC') as day, sum(value)::text as value
     from usage_reports where reported_at is not null and processor_error is null and usage_at >= :start and usage_at < :end
     group by organization_id, customer_id, meter, 4`,
    { start, end },
  );
  return rows;
}

interface DayFigures {
  customerId: string;
  meter: MeterName;
  /** `YYYY-MM-DD` */
  day: string;
  reported: bigint;
  atProcessor: bigint;
}

/** Resolves the day's open difference as matched, with the figures that agree: how many were resolved. */
export async function resolveMatchedDifference(db: Knex, figures: DayFigures): Promise<number> {
  return db('usage_differences')
    .where({ customer_id: figures.customerId, meter: figures.meter, day: figures.day })
    .whereNull('resolved_at')
    .update({ resolved_at: db.fn.now(), checked_at: db.fn.now(), resolution: 'matched: the processor counts what was reported', reported: String(figures.reported), at_processor: String(figures.atProcessor) });
}

/**
 * Opens the day's difference, or updates the figures of the open one; false when nothing was
 * recorded: a difference settled outside the meter (an invoice item, a credit note, the operator's
 * note) stays as it is at the processor, and is not opened again while its figures stay the same.
 */
export async function recordDifference(db: Db, figures: DayFigures & { organizationId: number }): Promise<boolean> {
  const { rows } = await db.raw<{ rows: unknown[] }>(
    `insert into usage_differences (organization_id, customer_id, meter, day, reported, at_processor)
     select cast(:organization as integer), cast(:customer as text), cast(:meter as text), cast(:day as date), cast(:reported as bigint), cast(:atProcessor as bigint)
     where not exists (select 1 from usage_differences where customer_id = :customer and meter = :meter and day = cast(:day as date)
                         and reported = cast(:reported as bigint) and at_processor = cast(:atProcessor as bigint)
                         and resolved_at is not null and resolution not like 'matched%' and resolution not like 'corrected: meter_event%')
     on conflict (customer_id, meter, day) where resolved_at is null
     do update set reported = excluded.reported, at_processor = excluded.at_processor, checked_at = now()
     returning id`,
    { organization: figures.organizationId, customer: figures.customerId, meter: figures.meter, day: figures.day, reported: String(figures.reported), atProcessor: String(figures.atProcessor) },
  );
  return rows.length > 0;
}

/** The differences, their day as `YYYY-MM-DD` (a Postgres date, not a Date at local midnight). */
function differences(db: Db) {
  return db<UsageDifference>('usage_differences').select('*', db.raw('day::text as day'));
}

/** The open differences (of one organization), oldest day first. */
export async function openDifferences(db: Db, organizationId?: number): Promise<UsageDifference[]> {
  const query = differences(db).whereNull('resolved_at').orderBy(['usage_differences.day', 'id']);
  if (organizationId !== undefined) query.where({ organization_id: organizationId });
  return query;
}

export async function findOpenDifference(db: Db, id: string): Promise<UsageDifference | undefined> {
  const [difference] = await differences(db).where({ id }).whereNull('resolved_at');
  return difference;
}

/** Records a correction about to be sent: its id. */
export async function insertCorrection(
  db: Db,
  difference: Pick<UsageDifference, 'id' | 'organization_id' | 'customer_id' | 'meter' | 'day'>,
  correction: { kind: string; value: bigint; amountCents: bigint | undefined; identifier: string },
): Promise<string> {
  const [row] = await db('usage_corrections')
    .insert({
      difference_id: difference.id,
      organization_id: difference.organization_id,
      customer_id: difference.customer_id,
      meter: difference.meter,
      day: difference.day,
      kind: correction.kind,
      value: String(correction.value),
      amount_cents: correction.amountCents === undefined ? null : String(correction.amountCents),
      identifier: correction.identifier,
    })
    .returning('id');
  return (row as { id: string }).id;
}

/** The correction was sent (the processor's object) and its difference is resolved, together. */
export async function markCorrectionSent(db: Knex, sent: { correctionId: string; differenceId: string; objectId: string; resolution: string }): Promise<void> {
  await db.transaction(async (trx) => {
    await trx('usage_corrections').where({ id: sent.correctionId }).update({ sent_at: trx.fn.now(), processor_object_id: sent.objectId });
    await trx('usage_differences').where({ id: sent.differenceId }).update({ resolved_at: trx.fn.now(), resolution: sent.resolution.slice(0, 500) });
  });
}

/** Resolves an open difference with a note: false when it was not open. */
export async function resolveDifference(db: Knex, id: string, resolution: string): Promise<boolean> {
  return (await db('usage_differences').where({ id }).whereNull('resolved_at').update({ resolved_at: db.fn.now(), resolution: resolution.slice(0, 500) })) > 0;
}

/** The latest finalized (open or paid) invoice of the billing account whose period holds `day`. */
export async function finalizedInvoiceCovering(db: Db, billingAccountId: number, day: Date): Promise<{ processor_invoice_id: string; status: string } | undefined> {
  return db('invoices')
    .where({ billing_account_id: billingAccountId })
    .where('period_start', '<=', day)
    .where('period_end', '>', day)
    .whereIn('status', ['open', 'paid'])
    .orderBy('created', 'desc')
    .first('processor_invoice_id', 'status');
}
