import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { JobDefinition } from '../jobs/queue.ts';
import { installationId } from './installation.ts';
import { backfillInvoices, findAccountByCustomer } from './processor-state.repository.ts';
import type { MeterName, PaymentProcessor, ProcessorMeterPrice } from './payment-processor.ts';
import { METER_PRICES } from './usage-reporting.ts';
import { findBillingAccount } from './billing.repository.ts';
import {
  countedReportsByDay,
  finalizedInvoiceCovering,
  findOpenDifference,
  insertCorrection,
  markCorrectionSent,
  openDifferences,
  recordDifference,
  resolveDifference,
  resolveMatchedDifference,
  type UsageDifference,
} from './usage-differences.repository.ts';

export const RECONCILE_USAGE_QUEUE = 'reconcile-usage';

const DAY_MS = 86_400_000;
/** Stripe takes meter events of the past 35 days: older days are neither compared nor corrected. */
const WINDOW_DAYS = 35;
/** Stripe aggregates meter events asynchronously: a day is compared once it ended an hour ago. */
const SETTLE_MS = 3_600_000;
/** Stripe finalizes a period's invoice about an hour after the period ends; usage sent later is not on it. */
const FINALIZATION_GRACE_MS = 3_600_000;

/** What one reconciliation compared and found. */
export interface ReconcileOutcome {
  /** Customer-meter pairs compared. */
  compared: number;
  /** Days that differ (open differences after the run). */
  differences: number;
  /** Open differences the run found agreeing again, resolved as `matched`. */
  matched: number;
}

/** What a fix sent: a meter event, an invoice item or a credit note (`none`: under half a cent), under its identifier. */
export interface Correction {
  kind: 'meter_event' | 'invoice_item' | 'credit_note' | 'none';
  /** The difference in millionths of a dollar (what the processor missed; negative: what it counted too much). */
  value: bigint;
  /** The amount of an invoice item or credit note, in cents (the difference rounded once, half up). */
  amountCents?: bigint;
  identifier: string;
}

/**
 * Reconciliation with the payment processor: per customer, meter and day (UTC) of the last 35 days,
 * what we reported as counted against the processor's meter summary of that day. A day that
 * differs is recorded (`usage_differences`, one open per customer, meter and day) and alerted; one
 * that agrees again is resolved `matched`. Invoices are backfilled on the way. A daily job runs it,
 * `billing reconcile` at once. `correct` applies the correction rule (a meter event, an invoice
 * item or a credit note, depending on the invoice's state): docs/billing.md, Reconciliation.
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
          outcome.matched += await resolveMatchedDifference(this.#db, { customerId, meter, day: iso, reported, atProcessor });
          continue;
        }
        const opened = await recordDifference(this.#db, { organizationId: Number(organizationId), customerId, meter, day: iso, reported, atProcessor });
        if (!opened) continue;
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
    return openDifferences(this.#db, organizationId);
  }

  /**
   * Fixes one open difference by the rule above, records what was sent (`usage_corrections`) and
   * resolves it. Throws when the day's invoice is not finalized yet (a credit note needs one).
   * `at` stands for now (the processor's time; tests on a test clock give theirs).
   */
  async correct(differenceId: string, at = new Date()): Promise<Correction> {
    const difference = await findOpenDifference(this.#db, differenceId);
    if (!difference) throw new Error(`no open difference ${differenceId}`);
    const missing = BigInt(difference.reported) - BigInt(difference.at_processor);
    const day = new Date(`${difference.day}T00:00:00Z`);
    const account = await findBillingAccount(this.#db, difference.organization_id);
    const now = at.getTime();
    const periodStart = account?.current_period_start instanceof Date ? account.current_period_start.getTime() : undefined;
    const invoiced = (periodStart !== undefined && day.getTime() < periodStart && now >= periodStart + FINALIZATION_GRACE_MS) || day.getTime() < now - (WINDOW_DAYS - 1) * DAY_MS;
    const cents = (micros: bigint) => (micros + 5_000n) / 10_000n;
    const send = async (correction: Omit<Correction, 'identifier'>, sendIt: (identifier: string) => Promise<string>): Promise<Correction> => {
      const identifier = `${await installationId(this.#db)}-correction-${randomUUID()}`;
      const correctionId = await insertCorrection(this.#db, difference, { kind: correction.kind, value: missing, amountCents: correction.amountCents, identifier });
      const objectId = await sendIt(identifier);
      await markCorrectionSent(this.#db, { correctionId, differenceId, objectId, resolution: `corrected: ${correction.kind} ${objectId} (${identifier})` });
      return { ...correction, identifier };
    };
    const description = (what: string) => `${what}: ${difference.meter} usage of ${difference.day} (reconciliation ${differenceId})`;

    if (missing > 0n && !invoiced) {
      // Inside the day and never ahead of now (the processor refuses events more than 5 minutes ahead), in the day's period.
      const stamp = new Date(Math.min(day.getTime() + DAY_MS - 1000, now));
      if (periodStart !== undefined && day.getTime() < periodStart && stamp.getTime() >= periodStart) stamp.setTime(periodStart - 1000);
      return send({ kind: 'meter_event', value: missing }, async (identifier) => {
        await this.#processor.reportMeterEvent({ meter: difference.meter, customerId: difference.customer_id, value: Number(missing), identifier, timestamp: stamp });
        return identifier;
      });
    }
    const amountCents = cents(missing < 0n ? -missing : missing);
    if (amountCents === 0n) {
      await this.resolve(differenceId, `under half a cent (${missing} millionths of a dollar): nothing to charge or credit`);
      return { kind: 'none', value: missing, identifier: '' };
    }
    if (missing > 0n) {
      return send({ kind: 'invoice_item', value: missing, amountCents }, async (key) => {
        const item = await this.#processor.createInvoiceItem({
          customerId: difference.customer_id,
          subscriptionId: account?.processor_subscription_id ?? null,
          amountCents: Number(amountCents),
          currency: account?.currency ?? 'usd',
          description: description('Usage not invoiced'),
          key,
        });
        return item.id;
      });
    }
    const invoice = account ? await finalizedInvoiceCovering(this.#db, account.id, day) : undefined;
    if (!invoice) {
      throw new Error(`the invoice of ${difference.day} is not finalized yet (a credit note needs a finalized invoice): fix difference ${differenceId} again once it is`);
    }
    return send({ kind: 'credit_note', value: missing, amountCents }, async (key) => {
      const note = await this.#processor.createCreditNote({ invoiceId: invoice.processor_invoice_id, paid: invoice.status === 'paid', amountCents: Number(amountCents), description: description('Usage invoiced twice'), key });
      return note.id;
    });
  }

  /** Records that the operator resolved a difference outside the service (a credit note, an invoice item). */
  async resolve(differenceId: string, note: string): Promise<void> {
    if (!(await resolveDifference(this.#db, differenceId, `by the operator: ${note}`))) throw new Error(`no open difference ${differenceId}`);
  }

  /**
   * What the processor should count per customer and meter (`<organization>\t<customer>\t<meter>`)
   * and day start (ms): reports marked counted and not refused later (a correction sent makes the
   * processor's count reach it; it is not counted here again).
   */
  async #ourDailyTotals(start: Date, end: Date): Promise<Map<string, Map<number, bigint>>> {
    const rows = await countedReportsByDay(this.#db, start, end);
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
