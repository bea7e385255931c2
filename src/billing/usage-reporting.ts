import type { Knex } from 'knex';
import type { Logger } from 'pino';
import { UsageReportRow } from '../db/models/usage-reports.ts';
import type { JobDefinition } from '../jobs/queue.ts';
import { billingPeriodBounds } from './billing.repository.ts';
import { installationId } from './installation.ts';
import type { MeterName, MeterPricesInput, PaymentProcessor, ProcessorMeterPrice } from './payment-processor.ts';

export const REPORT_USAGE_QUEUE = 'report-usage';

/**
 * The metered prices every postpaid subscription carries, one per meter. A meter event carries the
 * amount of the usage it reports in millionths of a dollar, priced per `service_key` from the price
 * table (which one price per meter cannot do), so each unit costs a ten-thousandth of a cent and an
 * invoice charges what the usage summary estimates.
 */
export const METER_PRICES: MeterPricesInput = { currency: 'usd', unitAmountDecimal: { gpu_instance_seconds: '0.0001', hosted_tokens: '0.0001' } };

/**
 * The billing account (`b`) has a subscription that invoices its meters: Stripe bills metered usage
 * through a subscription item in its period, and `past_due` still invoices.
 */
const LIVE_SUBSCRIPTION = "(b.processor_subscription_id is not null and b.subscription_status in ('active', 'trialing', 'past_due'))";

/** Organizations claimed per meter and round; rows per report (an organization with more is claimed again next round). */
const ORGANIZATIONS_PER_ROUND = 500;
const ROWS_PER_REPORT = 50_000;
/**
 * A report first sent longer ago is not sent again blindly: Stripe refuses a repeated identifier
 * "within a rolling period of at least 24 hours" and may count it again after; an hour is kept spare.
 */
const RESEND_WINDOW_MS = 23 * 3_600_000;
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

/** Meter events the processor accepted in one run, per meter. */
export type ReportTotals = Record<MeterName, number>;

interface DueOrganization {
  organization_id: number;
  customer_id: string;
}

/**
 * Reports closed GPU intervals and hosted-token usage records to the processor's meters as amounts.
 *
 * Claiming: per organization and meter, one statement takes the unclaimed rows of one billing
 * period (the oldest's), inserts a `usage_reports` row with their exact amount, stamped with their
 * latest usage, and marks them with it: a report never spans a period's bound, so Stripe invoices
 * all of it in the period it happened in. The report's value is
 * `floor(cumulative amount × 10⁶) − floor(previous cumulative amount × 10⁶)` millionths of a dollar,
 * so rounding never loses or adds a cent over any number of reports. An organization has at most
 * one unsent report per meter (claims of an organization and meter are serialized by an advisory
 * lock); its usage waits behind it.
 *
 * Sending: each unsent report is one meter event under its own identifier (the installation's id
 * and a random one, so no other installation or restored database repeats it). Stripe refuses an
 * identifier it holds (within at least 24 hours) rather than count it again: a retried, concurrent
 * or crashed run that re-sends a report the processor had takes that refusal as "counted". A report
 * first sent more than 23 hours ago is sent again only once the meter's summary shows the processor
 * does not have it (`#send`). A report is marked sent (with its rows) only after the processor
 * accepted it or said it had it.
 *
 * A refused report opens a `report_failed` anomaly for the organization and meter (the usage
 * summary's `open_anomalies`) and fails the job, which pg-boss retries with backoff; the other
 * organizations' reports go on, and the next accepted report of that organization and meter
 * resolves it. Organizations with no processor customer yet (payment never set up) are skipped:
 * their usage waits, unclaimed, until they have one. An organization with a customer but no live
 * subscription has its usage held too, with a `no_subscription` anomaly: Stripe would accept the
 * events and never invoice them.
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
    for (const meter of Object.keys(SOURCES) as MeterName[]) {
      await this.#holdUnsubscribed(meter);
      for (let round = 0; ; round++) {
        const due = await this.#due(meter);
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
    for (const meter of Object.keys(SOURCES) as MeterName[]) {
      const source = SOURCES[meter];
      const { rows } = await this.#db.raw<{ rows: Array<{ organization_id: number; period_end: Date; oldest: Date; amount: string }> }>(
        `select u.organization_id, b.current_period_start as period_end, min(${source.at}) as oldest, sum(u.quantity * p.unit_amount_decimal)::text as amount
         from ${source.from} join billing_accounts b on b.organization_id = u.organization_id
         where u.reported_at is null and ${source.billable}
           and ${source.at} < b.current_period_start and now() >= b.current_period_start + ${LATE_FOR_INVOICE}
         group by u.organization_id, b.current_period_start`,
      );
      for (const row of rows) {
        log.error(
          { alert: 'usage_late_for_invoice', meter, organization_id: row.organization_id, period_end: row.period_end, oldest_usage_at: row.oldest, amount: row.amount },
          'usage of an ended billing period is not at the payment processor yet: its invoice is finalized an hour after the period ends, without it',
        );
      }
    }
  }

  /** Organizations with unclaimed usage of the meter, a live subscription and no unsent report. */
  async #due(meter: MeterName): Promise<DueOrganization[]> {
    const source = SOURCES[meter];
    const { rows } = await this.#db.raw<{ rows: DueOrganization[] }>(
      `select distinct u.organization_id, b.processor_customer_id as customer_id
       from ${source.from} join billing_accounts b on b.organization_id = u.organization_id
       where ${unclaimed(meter)} and b.processor_customer_id is not null and ${LIVE_SUBSCRIPTION}
         and not exists (select 1 from usage_reports r where r.organization_id = u.organization_id and r.meter = :meter and r.reported_at is null)
       limit :limit`,
      { meter, limit: ORGANIZATIONS_PER_ROUND },
    );
    return rows;
  }

  /**
   * Usage of organizations whose customer has no live subscription is held, unclaimed (Stripe
   * takes meter events for such a customer and never invoices them), and shown: one open
   * `no_subscription` anomaly per organization and meter, resolved once its usage is reported.
   */
  async #holdUnsubscribed(meter: MeterName): Promise<void> {
    const source = SOURCES[meter];
    await this.#db.raw(
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

  /** Claims the organization's unclaimed usage of the meter into one report, in one transaction. */
  async #claim(meter: MeterName, { organization_id, customer_id }: DueOrganization): Promise<void> {
    const source = SOURCES[meter];
    await this.#db.transaction(async (trx) => {
      await trx.raw('select pg_advisory_xact_lock(hashtext(?), ?)', [`usage-report:${meter}`, organization_id]);
      if (await UsageReportRow.query(trx).where({ organization_id, meter }).whereNull('reported_at').first()) return;
      const period = await this.#periodOfOldest(trx, meter, organization_id);
      if (!period) return;
      await trx.raw(
        `with claimed as (
           select ${source.key.map((column) => `u.${column}`).join(', ')}, u.quantity, u.quantity * p.unit_amount_decimal as amount, ${source.at} as usage_at
           from ${source.from}
           where u.organization_id = :organization and ${unclaimed(meter)}
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
        { organization: organization_id, meter, customer: customer_id, limit: ROWS_PER_REPORT, installation: await installationId(this.#db), ...period },
      );
    });
  }

  /**
   * The billing period of the organization's oldest unclaimed usage of the meter, as the bounds of
   * its account's current period cut time (before its start, within it, after its end): a report
   * takes usage of one period only, so its meter event (stamped with its latest usage) is invoiced
   * with all of it. Undefined when nothing is unclaimed.
   */
  async #periodOfOldest(trx: Knex.Transaction, meter: MeterName, organizationId: number): Promise<{ from: Date | string; to: Date | string } | undefined> {
    const source = SOURCES[meter];
    const { rows } = await trx.raw<{ rows: Array<{ at: Date | null }> }>(
      `select min(${source.at}) as at from ${source.from} where u.organization_id = ? and ${unclaimed(meter)}`,
      [organizationId],
    );
    const oldest = rows[0]?.at;
    if (!oldest) return undefined;
    const bounds = await billingPeriodBounds(trx, organizationId);
    return { from: bounds.filter((bound) => bound <= oldest).at(-1) ?? '-infinity', to: bounds.find((bound) => bound > oldest) ?? 'infinity' };
  }

  /** Sends the meter's unsent reports, oldest first, and marks each one the processor counted. */
  async #sendUnsent(log: Logger, meter: MeterName): Promise<{ reported: number; failed: number }> {
    const unsent = await UsageReportRow.query(this.#db).where({ meter }).whereNull('reported_at').orderBy('id');
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
        await this.#openAnomaly(report, error instanceof Error ? error.message : String(error));
        continue;
      }
      await this.#markSent(report);
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
    const { rows } = await this.#db.raw<{ rows: Array<{ first_sent_at: Date; now: Date }> }>(
      'update usage_reports set first_sent_at = coalesce(first_sent_at, now()) where id = ? returning first_sent_at, now() as now',
      [report.id],
    );
    const { first_sent_at: firstSentAt, now } = rows[0] as { first_sent_at: Date; now: Date };
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
    const row = (await this.#db('usage_reports')
      .where({ organization_id: report.organization_id, meter: report.meter, customer_id: report.customer_id })
      .whereNotNull('reported_at')
      .where('usage_at', '>=', start)
      .where('usage_at', '<', end)
      .sum({ value: 'value' })
      .first()) as { value: string | null } | undefined;
    const counted = Number(row?.value ?? 0);
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

  async #markSent(report: UsageReportRow): Promise<void> {
    await this.#db.transaction(async (trx) => {
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

  async #openAnomaly(report: UsageReportRow, detail: string): Promise<void> {
    await this.#db.raw(
      `insert into usage_anomalies (organization_id, meter, kind, detail, usage_at) values (?, ?, 'report_failed', ?, ?)
       on conflict (organization_id, meter) where kind = 'report_failed' and resolved_at is null and gpu_usage_interval_id is null
       do update set detail = excluded.detail`,
      [report.organization_id, report.meter, `The payment processor refused the report: ${detail}`.slice(0, 500), report.usage_at],
    );
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
