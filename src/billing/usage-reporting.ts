import type { Knex } from 'knex';
import type { Logger } from 'pino';
import { UsageReportRow } from '../db/models/usage-reports.ts';
import type { JobDefinition } from '../jobs/queue.ts';
import type { MeterName, MeterPricesInput, PaymentProcessor } from './payment-processor.ts';

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
 * Where each meter's usage lives: its table and the columns of its key, its rows joined with their
 * price (`p`), the condition of an unclaimed row, and when the usage happened.
 */
const SOURCES: Record<MeterName, { table: string; key: readonly string[]; from: string; unclaimed: string; at: string }> = {
  gpu_instance_seconds: {
    table: 'gpu_usage_intervals',
    key: ['id'],
    from: 'gpu_usage_intervals u join prices p using (service_key)',
    unclaimed: 'u.usage_report_id is null',
    at: 'u.ended_at',
  },
  hosted_tokens: {
    table: 'usage_records',
    // Its primary key (the table is partitioned by month of created_at; id is not indexed alone).
    key: ['usage_id', 'created_at'],
    // The usage the summary prices as hosted tokens (src/billing/billing.repository.ts, usageTotals).
    from: "usage_records u join prices p on p.resource_kind = 'hosted_model' and p.instance_type = u.model",
    unclaimed: "u.usage_report_id is null and u.deployment_id is null and u.unit = 'token' and u.quantity > 0",
    at: 'u.created_at',
  },
};

/** Meter events the processor accepted in one run, per meter. */
export type ReportTotals = Record<MeterName, number>;

interface DueOrganization {
  organization_id: number;
  customer_id: string;
}

/**
 * Reports closed GPU intervals and hosted-token usage records to the processor's meters as amounts.
 *
 * Claiming: per organization and meter, one statement takes the unclaimed rows, inserts a
 * `usage_reports` row with their exact amount and marks them with it. The report's value is
 * `floor(cumulative amount × 10⁶) − floor(previous cumulative amount × 10⁶)` millionths of a dollar,
 * so rounding never loses or adds a cent over any number of reports. An organization has at most
 * one unsent report per meter (claims of an organization and meter are serialized by an advisory
 * lock); its usage waits behind it.
 *
 * Sending: each unsent report is one meter event under the identifier `usage_report_<id>`; the
 * processor counts an identifier once, so a retried, concurrent or crashed run re-sends without
 * counting twice. A report is marked sent (with its rows) only after the processor accepted it.
 *
 * A refused report opens a `report_failed` anomaly for the organization and meter (the usage
 * summary's `open_anomalies`) and fails the job, which pg-boss retries with backoff; the other
 * organizations' reports go on, and the next accepted report of that organization and meter
 * resolves it. Organizations with no processor customer yet (payment never set up) are skipped:
 * their usage waits, unclaimed, until they have one.
 */
export class UsageReporter {
  readonly #db: Knex;
  readonly #processor: PaymentProcessor;
  /** The meters and their prices at the processor, made sure of once per process. */
  #meters: Promise<unknown> | undefined;

  constructor(db: Knex, processor: PaymentProcessor) {
    this.#db = db;
    this.#processor = processor;
  }

  async run(log: Logger): Promise<ReportTotals> {
    const reported: ReportTotals = { gpu_instance_seconds: 0, hosted_tokens: 0 };
    let failures = 0;
    for (const meter of Object.keys(SOURCES) as MeterName[]) {
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
    if (failures) throw new Error(`${failures} usage reports were refused by the payment processor; retried with backoff`);
    return reported;
  }

  /** Organizations with unclaimed usage of the meter, a processor customer and no unsent report. */
  async #due(meter: MeterName): Promise<DueOrganization[]> {
    const source = SOURCES[meter];
    const { rows } = await this.#db.raw<{ rows: DueOrganization[] }>(
      `select distinct u.organization_id, b.processor_customer_id as customer_id
       from ${source.from} join billing_accounts b on b.organization_id = u.organization_id
       where ${source.unclaimed} and b.processor_customer_id is not null
         and not exists (select 1 from usage_reports r where r.organization_id = u.organization_id and r.meter = :meter and r.reported_at is null)
       limit :limit`,
      { meter, limit: ORGANIZATIONS_PER_ROUND },
    );
    return rows;
  }

  /** Claims the organization's unclaimed usage of the meter into one report, in one transaction. */
  async #claim(meter: MeterName, { organization_id, customer_id }: DueOrganization): Promise<void> {
    const source = SOURCES[meter];
    await this.#db.transaction(async (trx) => {
      await trx.raw('select pg_advisory_xact_lock(hashtext(?), ?)', [`usage-report:${meter}`, organization_id]);
      if (await UsageReportRow.query(trx).where({ organization_id, meter }).whereNull('reported_at').first()) return;
      await trx.raw(
        `with claimed as (
           select ${source.key.map((column) => `u.${column}`).join(', ')}, u.quantity, u.quantity * p.unit_amount_decimal as amount, ${source.at} as usage_at
           from ${source.from}
           where u.organization_id = :organization and ${source.unclaimed}
           order by u.id limit :limit
         ), totals as (
           select sum(quantity) as quantity, sum(amount) as amount, max(usage_at) as usage_at from claimed having count(*) > 0
         ), previous as (
           select coalesce(max(cumulative_amount), 0) as amount, coalesce(max(cumulative_micros), 0) as micros
           from (select cumulative_amount, cumulative_micros from usage_reports
                 where organization_id = :organization and meter = :meter order by id desc limit 1) latest
         ), report as (
           insert into usage_reports (organization_id, meter, customer_id, quantity, amount, cumulative_amount, cumulative_micros, value, usage_at)
           select :organization, :meter, :customer, t.quantity, t.amount, running.amount, running.micros, running.micros - p.micros, t.usage_at
           from totals t cross join previous p
           cross join lateral (select p.amount + t.amount as amount, floor((p.amount + t.amount) * 1000000)::bigint as micros) running
           returning id
         )
         update ${source.table} set usage_report_id = (select id from report) where (${source.key.join(', ')}) in (select ${source.key.join(', ')} from claimed)`,
        { organization: organization_id, meter, customer: customer_id, limit: ROWS_PER_REPORT },
      );
    });
  }

  /** Sends the meter's unsent reports, oldest first, and marks each one the processor accepted. */
  async #sendUnsent(log: Logger, meter: MeterName): Promise<{ reported: number; failed: number }> {
    const unsent = await UsageReportRow.query(this.#db).where({ meter }).whereNull('reported_at').orderBy('id');
    if (!unsent.length) return { reported: 0, failed: 0 };
    await this.#ensureMeters();
    let failed = 0;
    for (const report of unsent) {
      try {
        // Nothing to bill yet (less than a millionth of a dollar so far): the claim is kept, nothing is sent.
        if (report.value !== '0') {
          await this.#processor.reportMeterEvent({
            meter,
            customerId: report.customer_id,
            value: Number(report.value),
            identifier: `usage_report_${report.id}`,
            timestamp: report.usage_at,
          });
        }
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

  async #ensureMeters(): Promise<unknown> {
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
        .where({ organization_id: report.organization_id, meter: report.meter, kind: 'report_failed' })
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
