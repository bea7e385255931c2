import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { JobDefinition } from '../jobs/queue.ts';
import { installationId } from './installation.ts';
import { backfillInvoices, findAccountByCustomer } from './processor-state.repository.ts';
import type { MeterName, PaymentProcessor, ProcessorMeterPrice } from './payment-processor.ts';
import { METER_PRICES } from './usage-reporting.ts';

export const RECONCILE_USAGE_QUEUE = 'reconcile-usage';

const DAY_MS = 86_400_000;
/** Stripe takes meter events of the past 35 days: older days are neither compared nor corrected. */
const WINDOW_DAYS = 35;
/** Stripe aggregates meter events asynchronously: a day is compared once it ended an hour ago. */
const SETTLE_MS = 3_600_000;
/** Stripe finalizes a period's invoice about an hour after the period ends; usage sent later is not on it. */
const FINALIZATION_GRACE_MS = 3_600_000;

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

/** What one reconciliation compared and found. */
export interface ReconcileOutcome {
  /** Customer-meter pairs compared. */
  compared: number;
  /** Days that differ (open differences after the run). */
  differences: number;
  /** Open differences the run found agreeing again, resolved as `matched`. */
  matched: number;
}

/** Why a difference cannot be fixed by the service (not built: a credit note), with what to do instead. */
export class CorrectionNotBuilt extends Error {
  constructor(message: string) {
    super(`NOT_IMPLEMENTED: ${message}`);
  }
}

/**
 * Reconciliation with the payment processor (issue 33): per customer, meter and day (UTC) of the
 * last 35 days that ended over an hour ago, the values of the reports marked counted (minus those
 * the processor refused later, plus corrections sent) against the processor's meter event summary
 * of that day. Each day that differs is recorded (`usage_differences`, one open per customer,
 * meter and day, its figures updated on each run) and alerted; an open one whose figures agree
 * again is resolved `matched`. Each customer's invoices are backfilled from the processor's list on
 * the way. A daily job runs it; `billing reconcile` runs it at once.
 *
 * The correction rule (`correct`): a day the processor counted less than we reported, in a period
 * whose invoice is not finalized yet (the account's current period, or the one before it within
 * an hour of its end), gets the missing amount as one meter event of its own stamped inside that
 * day (the last second of it, or now when that is earlier) under a correction identifier; Stripe
 * then invoices it with the rest of the period. A day the processor counted more, or one of a
 * period already invoiced, needs a credit note or an invoice item on the next invoice: not built
 * (the CLI answers NOT_IMPLEMENTED with the amount, and `--resolve` records what the operator did).
 */
export class UsageReconciler {
  readonly #db: Knex;
  readonly #processor: PaymentProcessor;

  constructor(db: Knex, processor: PaymentProcessor) {
    this.#db = db;
    this.#processor = processor;
  }

  async run(log: Logger, now = new Date()): Promise<ReconcileOutcome> {
    const end = new Date(Math.floor((now.getTime() - SETTLE_MS) / DAY_MS) * DAY_MS);
    const start = new Date(end.getTime() - WINDOW_DAYS * DAY_MS);
    const meters = await this.#processor.ensureMeterPrices(METER_PRICES);
    const ours = await this.#ourDailyTotals(start, end);
    const outcome: ReconcileOutcome = { compared: 0, differences: 0, matched: 0 };
    const backfilled = new Set<string>();
    for (const [key, days] of ours) {
      const [organizationId, customerId, meter] = key.split('\t') as [string, string, MeterName];
      const meterId = meterIdOf(meters, meter);
      const theirs = await this.#processor.meterDailyTotals({ meterId, customerId, start, end });
      outcome.compared++;
      // Invoices from the processor's list too, not only from webhooks (one lost leaves no gap).
      if (!backfilled.has(customerId)) {
        backfilled.add(customerId);
        const account = await findAccountByCustomer(this.#db, customerId);
        if (account?.processor_customer_id) await backfillInvoices(this.#db, this.#processor, { id: account.id, processor_customer_id: account.processor_customer_id });
      }
      for (const day of new Set([...days.keys(), ...theirs.keys()])) {
        const reported = days.get(day) ?? 0n;
        const atProcessor = BigInt(theirs.get(day) ?? 0);
        const iso = new Date(day).toISOString().slice(0, 10);
        if (reported === atProcessor) {
          outcome.matched += await this.#db('usage_differences')
            .where({ customer_id: customerId, meter, day: iso })
            .whereNull('resolved_at')
            .update({ resolved_at: this.#db.fn.now(), checked_at: this.#db.fn.now(), resolution: 'matched: the processor counts what was reported', reported: String(reported), at_processor: String(atProcessor) });
          continue;
        }
        // A difference the operator settled outside (a credit note) stays as it is at the processor: not opened again.
        const { rows } = await this.#db.raw<{ rows: unknown[] }>(
          `insert into usage_differences (organization_id, customer_id, meter, day, reported, at_processor)
           select cast(:organization as integer), cast(:customer as text), cast(:meter as text), cast(:day as date), cast(:reported as bigint), cast(:atProcessor as bigint)
           where not exists (select 1 from usage_differences where customer_id = :customer and meter = :meter and day = cast(:day as date)
                               and reported = cast(:reported as bigint) and at_processor = cast(:atProcessor as bigint) and resolution like 'by the operator:%')
           on conflict (customer_id, meter, day) where resolved_at is null
           do update set reported = excluded.reported, at_processor = excluded.at_processor, checked_at = now()
           returning id`,
          { organization: Number(organizationId), customer: customerId, meter, day: iso, reported: String(reported), atProcessor: String(atProcessor) },
        );
        if (!rows.length) continue;
        outcome.differences++;
        log.error(
          { alert: 'usage_difference', organization_id: Number(organizationId), customer_id: customerId, meter, day: iso, reported: String(reported), at_processor: String(atProcessor) },
          'the payment processor counts another amount than was reported for a day (see billing reconcile)',
        );
      }
    }
    return outcome;
  }

  /** The open differences (of one organization), oldest day first. */
  async open(organizationId?: number): Promise<UsageDifference[]> {
    const query = this.#differences().whereNull('resolved_at').orderBy(['usage_differences.day', 'id']);
    if (organizationId !== undefined) query.where({ organization_id: organizationId });
    return query;
  }

  /** The differences, their day as `YYYY-MM-DD` (a Postgres date, not a Date at local midnight). */
  #differences() {
    return this.#db<UsageDifference>('usage_differences').select('*', this.#db.raw('day::text as day'));
  }

  /**
   * Fixes one open difference by the rule above: sends the missing amount as a correction and
   * resolves it. Throws CorrectionNotBuilt for what the rule leaves to a credit note.
   */
  async correct(differenceId: string): Promise<{ identifier: string; value: bigint }> {
    const [difference] = await this.#differences().where({ id: differenceId }).whereNull('resolved_at');
    if (!difference) throw new Error(`no open difference ${differenceId}`);
    const missing = BigInt(difference.reported) - BigInt(difference.at_processor);
    const day = new Date(`${difference.day}T00:00:00Z`);
    if (missing < 0n) {
      throw new CorrectionNotBuilt(
        `the processor counted ${-missing} millionths of a dollar more than was reported for ${isoDay(day)}: a credit note (or a meter event adjustment within 24 hours of the surplus events) is needed; issue it in the Dashboard, then: billing reconcile --resolve ${differenceId} --note "…"`,
      );
    }
    const account = await this.#db('billing_accounts').where({ organization_id: difference.organization_id }).first('current_period_start');
    const now = Date.now();
    const periodStart = account?.current_period_start instanceof Date ? account.current_period_start.getTime() : undefined;
    const invoiced = periodStart !== undefined && day.getTime() + DAY_MS <= periodStart && now >= periodStart + FINALIZATION_GRACE_MS;
    if (invoiced || day.getTime() < now - (WINDOW_DAYS - 1) * DAY_MS) {
      throw new CorrectionNotBuilt(
        `${isoDay(day)} belongs to a period already invoiced (or older than the processor takes meter events): ${missing} millionths of a dollar need an invoice item on the next invoice; add it in the Dashboard, then: billing reconcile --resolve ${differenceId} --note "…"`,
      );
    }
    // Inside the day and never ahead of now (the processor refuses events more than 5 minutes ahead).
    const stamp = new Date(Math.min(day.getTime() + DAY_MS - 1000, now));
    if (periodStart !== undefined && day.getTime() < periodStart && stamp.getTime() >= periodStart) stamp.setTime(periodStart - 1000);
    const identifier = `${await installationId(this.#db)}-correction-${randomUUID()}`;
    const [correction] = await this.#db('usage_corrections')
      .insert({ difference_id: differenceId, organization_id: difference.organization_id, customer_id: difference.customer_id, meter: difference.meter, day: isoDay(day), value: String(missing), identifier })
      .returning('id');
    await this.#processor.reportMeterEvent({ meter: difference.meter, customerId: difference.customer_id, value: Number(missing), identifier, timestamp: stamp });
    await this.#db.transaction(async (trx) => {
      await trx('usage_corrections').where({ id: correction.id }).update({ sent_at: trx.fn.now() });
      await trx('usage_differences').where({ id: differenceId }).update({ resolved_at: trx.fn.now(), resolution: `corrected: a meter event of ${missing} (${identifier})` });
    });
    return { identifier, value: missing };
  }

  /** Records that the operator resolved a difference outside the service (a credit note, an invoice item). */
  async resolve(differenceId: string, note: string): Promise<void> {
    const updated = await this.#db('usage_differences').where({ id: differenceId }).whereNull('resolved_at').update({ resolved_at: this.#db.fn.now(), resolution: `by the operator: ${note}`.slice(0, 500) });
    if (!updated) throw new Error(`no open difference ${differenceId}`);
  }

  /**
   * What the processor should count per customer and meter (`<organization>\t<customer>\t<meter>`)
   * and day start (ms): reports marked counted and not refused later (a correction sent makes the
   * processor's count reach it; it is not counted here again).
   */
  async #ourDailyTotals(start: Date, end: Date): Promise<Map<string, Map<number, bigint>>> {
    const { rows } = await this.#db.raw<{ rows: Array<{ organization_id: number; customer_id: string; meter: MeterName; day: Date; value: string }> }>(
      `select organization_id, customer_id, meter, date_trunc('day', usage_at, 'UTC') as day, sum(value)::text as value
       from usage_reports where reported_at is not null and processor_error is null and usage_at >= :start and usage_at < :end
       group by organization_id, customer_id, meter, 4`,
      { start, end },
    );
    const totals = new Map<string, Map<number, bigint>>();
    for (const row of rows) {
      const key = `${row.organization_id}\t${row.customer_id}\t${row.meter}`;
      const days = totals.get(key) ?? new Map<number, bigint>();
      days.set(row.day.getTime(), (days.get(row.day.getTime()) ?? 0n) + BigInt(row.value));
      totals.set(key, days);
    }
    return totals;
  }
}

function meterIdOf(meters: ProcessorMeterPrice[], meter: MeterName): string {
  const found = meters.find((price) => price.meter === meter);
  if (!found) throw new Error(`the processor has no ${meter} meter`);
  return found.meterId;
}

const isoDay = (day: Date) => day.toISOString().slice(0, 10);

/** Every day at 03:17 UTC, the last 35 days compared with the processor's meter summaries. */
export function reconcileUsageJob(reconciler: UsageReconciler): JobDefinition<object> {
  return {
    queue: RECONCILE_USAGE_QUEUE,
    schedule: '17 3 * * *',
    retryLimit: 3,
    retryDelaySeconds: 300,
    async handle(_data, { log }) {
      const outcome = await reconciler.run(log);
      log.info(outcome, 'usage reconciled with the payment processor');
    },
  };
}
