import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { UsageReportRow } from '../db/models/usage-reports.ts';
import type { JobDefinition } from '../jobs/queue.ts';
import { billingPeriodBounds } from '../metering/metering.repository.ts';
import { installationId } from './installation.ts';
import {
  claimUsage,
  dueOrganizations,
  hasUnsentReport,
  holdUnsubscribedUsage,
  lockClaimsOf,
  markFirstSent,
  markReportSent,
  METERS,
  oldestUnclaimedAt,
  openReportFailedAnomaly,
  sentValueBetween,
  unsentReports,
  usageLateForInvoice,
  type DueOrganization,
} from './usage-reports.repository.ts';
import type { MeterName, MeterPricesInput, PaymentProcessor, ProcessorMeterPrice } from './payment-processor.ts';

export const REPORT_USAGE_QUEUE = 'report-usage';

/**
 * The metered prices every postpaid subscription carries, one per meter. A meter event carries the
 * amount of the usage it reports in millionths of a dollar, priced per `service_key` from the price
 * table (which one price per meter cannot do), so each unit costs a ten-thousandth of a cent and an
 * invoice charges what the usage summary estimates.
 */
export const METER_PRICES: MeterPricesInput = { currency: 'usd', unitAmountDecimal: { gpu_instance_seconds: '0.0001', hosted_tokens: '0.0001' } };

/** Organizations claimed per meter and round; rows per report (an organization with more is claimed again next round). */
const ORGANIZATIONS_PER_ROUND = 500;
const ROWS_PER_REPORT = 50_000;
/**
 * A report first sent longer ago is not sent again blindly: Stripe refuses a repeated identifier
 * "within a rolling period of at least 24 hours" and may count it again after; an hour is kept spare.
 */
const RESEND_WINDOW_MS = 23 * 3_600_000;
/** Meter events the processor accepted in one run, per meter. */
export type ReportTotals = Record<MeterName, number>;

/**
 * Reports closed GPU intervals and hosted-token usage records to the processor's meters as amounts.
 * Per organization and meter, one statement claims unclaimed rows of one billing period into a
 * report (so none spans two invoices), under an advisory lock: at most one unsent report per
 * organization and meter. Each report is one meter event under its own identifier; Stripe refuses
 * an identifier it holds, and that refusal counts as sent, so a retried or concurrent run never
 * counts twice. A report is marked sent only once the processor has it. Rounding, the 23-hour
 * resend rule, anomalies, held usage: docs/billing.md, Reporting to the processor.
 */
export class UsageReporter {
  readonly #db: Knex;
  readonly #processor: PaymentProcessor;
  /** The meters and their prices at the processor, made sure of once per process. */
  #meters: Promise<ProcessorMeterPrice[]> | undefined;

  constructor(db: Knex, processor: PaymentProcessor) {
    this.#db = db;
    this.#processor = processor;
  }

  async run(log: Logger): Promise<ReportTotals> {
    const reported: ReportTotals = { gpu_instance_seconds: 0, hosted_tokens: 0 };
    let failures = 0;
    for (const meter of METERS) {
      await holdUnsubscribedUsage(this.#db, meter);
      for (let round = 0; ; round++) {
        const due = await dueOrganizations(this.#db, meter, ORGANIZATIONS_PER_ROUND);
        for (const organization of due) await this.#claim(meter, organization);
        const outcome = await this.#sendUnsent(log, meter);
        reported[meter] += outcome.reported;
        failures += outcome.failed;
        // Until no organization is due (one whose report was refused is not), or no progress was made.
        if (due.length === 0 || outcome.reported === 0) break;
      }
    }
    await this.#alertLateForInvoice(log);
    if (failures) throw new Error(`${failures} usage reports were refused by the payment processor; retried with backoff`);
    return reported;
  }

  /**
   * Usage of a period that has ended and is still not at the processor half an hour later: its
   * invoice is finalized an hour after the period's end, and usage reported after that is never on
   * it. An error-level log line with `alert: usage_late_for_invoice` per organization and meter,
   * every run while it lasts (a report refused, usage held without a subscription, or a worker down).
   */
  async #alertLateForInvoice(log: Logger): Promise<void> {
    for (const meter of METERS) {
      for (const row of await usageLateForInvoice(this.#db, meter)) {
        log.error(
          { alert: 'usage_late_for_invoice', meter, organization_id: row.organization_id, period_end: row.period_end, oldest_usage_at: row.oldest, amount: row.amount },
          'usage of an ended billing period is not at the payment processor yet: its invoice is finalized an hour after the period ends, without it',
        );
      }
    }
  }

  /** Claims the organization's unclaimed usage of the meter into one report, in one transaction. */
  async #claim(meter: MeterName, { organization_id, customer_id }: DueOrganization): Promise<void> {
    await this.#db.transaction(async (trx) => {
      await lockClaimsOf(trx, meter, organization_id);
      if (await hasUnsentReport(trx, meter, organization_id)) return;
      const period = await this.#periodOfOldest(trx, meter, organization_id);
      if (!period) return;
      await claimUsage(trx, { meter, organizationId: organization_id, customerId: customer_id, ...period, limit: ROWS_PER_REPORT, installation: await installationId(this.#db) });
    });
  }

  /**
   * The billing period of the organization's oldest unclaimed usage of the meter, as the bounds of
   * its account's current period cut time (before its start, within it, after its end): a report
   * takes usage of one period only, so its meter event (stamped with its latest usage) is invoiced
   * with all of it. Undefined when nothing is unclaimed.
   */
  async #periodOfOldest(trx: Knex.Transaction, meter: MeterName, organizationId: number): Promise<{ from: Date | string; to: Date | string } | undefined> {
    const oldest = await oldestUnclaimedAt(trx, meter, organizationId);
    if (!oldest) return undefined;
    const bounds = await billingPeriodBounds(trx, organizationId);
    return { from: bounds.filter((bound) => bound <= oldest).at(-1) ?? '-infinity', to: bounds.find((bound) => bound > oldest) ?? 'infinity' };
  }

  /** Sends the meter's unsent reports, oldest first, and marks each one the processor counted. */
  async #sendUnsent(log: Logger, meter: MeterName): Promise<{ reported: number; failed: number }> {
    const unsent = await unsentReports(this.#db, meter);
    if (!unsent.length) return { reported: 0, failed: 0 };
    const meters = await this.#ensureMeters();
    let failed = 0;
    for (const report of unsent) {
      try {
        // Nothing to bill yet (less than a millionth of a dollar so far): the claim is kept, nothing is sent.
        if (report.value !== '0') await this.#send(report, meters);
      } catch (error) {
        failed++;
        log.warn({ err: error, meter, organization_id: report.organization_id }, 'a usage report was refused; the job retries it');
        await openReportFailedAnomaly(this.#db, report, `The payment processor refused the report: ${error instanceof Error ? error.message : String(error)}`);
        continue;
      }
      await markReportSent(this.#db, report);
    }
    return { reported: unsent.length - failed, failed };
  }

  /**
   * Sends one report so that the processor counts it once, under Stripe's rules: it refuses a
   * repeated identifier within its uniqueness window (at least 24 hours), which then means "counted"
   * (the first send was accepted, and the run that sent it died before marking it); after the
   * window a repeat would count again, so a report first sent longer ago than RESEND_WINDOW_MS is
   * not sent again before the meter's summary says whether the processor has it.
   */
  async #send(report: UsageReportRow, meters: ProcessorMeterPrice[]): Promise<void> {
    const { firstSentAt, now } = await markFirstSent(this.#db, report.id);
    if (report.first_sent_at && now.getTime() - firstSentAt.getTime() >= RESEND_WINDOW_MS) {
      const counted = await this.#countedAtProcessor(report, meters);
      if (counted === 'yes') return;
      if (counted === 'unknown') {
        throw new Error(`report ${report.identifier}, first sent ${firstSentAt.toISOString()}, may or may not be counted: the meter's summary matches neither; reconcile it before it is sent again`);
      }
    }
    await this.#processor.reportMeterEvent({ meter: report.meter, customerId: report.customer_id, value: Number(report.value), identifier: report.identifier, timestamp: report.usage_at });
  }

  /**
   * Whether the processor counted a report that was sent before: the meter's total for the
   * customer over the report's minute, against the reports of that minute marked counted here.
   */
  async #countedAtProcessor(report: UsageReportRow, meters: ProcessorMeterPrice[]): Promise<'yes' | 'no' | 'unknown'> {
    const meterId = meters.find((price) => price.meter === report.meter)?.meterId;
    if (!meterId) return 'unknown';
    const start = new Date(Math.floor(report.usage_at.getTime() / 60_000) * 60_000);
    const end = new Date(start.getTime() + 60_000);
    const atProcessor = await this.#processor.meterTotal({ meterId, customerId: report.customer_id, start, end });
    const counted = await sentValueBetween(this.#db, report, start, end);
    if (atProcessor === counted + Number(report.value)) return 'yes';
    if (atProcessor === counted) return 'no';
    return 'unknown';
  }

  async #ensureMeters(): Promise<ProcessorMeterPrice[]> {
    this.#meters ??= this.#processor.ensureMeterPrices(METER_PRICES).catch((error: unknown) => {
      this.#meters = undefined;
      throw error;
    });
    return this.#meters;
  }
}

/** Every minute (after the GPU seconds are closed), unreported usage goes to the processor's meters. */
export function reportUsageJob(reporter: UsageReporter): JobDefinition<object> {
  return {
    queue: REPORT_USAGE_QUEUE,
    schedule: '* * * * *',
    retryLimit: 5,
    retryDelaySeconds: 30,
    async handle(_data, { log }) {
      const reported = await reporter.run(log);
      if (reported.gpu_instance_seconds || reported.hosted_tokens) log.debug(reported, 'usage reported to the payment processor');
    },
  };
}
