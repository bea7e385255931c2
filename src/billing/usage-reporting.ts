import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { JobDefinition } from '../jobs/queue.ts';
import type { MeterName, PaymentProcessor } from './payment-processor.ts';

export const REPORT_USAGE_QUEUE = 'report-usage';

/** Meter events sent per batch (per meter), before the batch is marked reported. */
const BATCH_SIZE = 200;

/** One unreported piece of usage, with the identifier the processor counts it under. */
interface PendingUsage {
  id: string;
  organization_id: number;
  customer_id: string;
  quantity: string;
  usage_at: Date;
}

/** Where each meter's unreported usage lives. */
const SOURCES: Record<MeterName, { table: string; identifier: (id: string) => string; pending: string }> = {
  gpu_instance_seconds: {
    table: 'gpu_usage_intervals',
    identifier: (id) => `gpu_usage_interval_${id}`,
    pending: `select u.id::text, u.organization_id, b.processor_customer_id as customer_id, u.quantity::text, u.ended_at as usage_at
              from gpu_usage_intervals u join billing_accounts b using (organization_id)
              where u.reported_at is null and b.processor_customer_id is not null
              order by u.id limit ?`,
  },
  hosted_tokens: {
    table: 'usage_records',
    identifier: (id) => `usage_record_${id}`,
    // The usage the summary prices as hosted tokens (src/billing/billing.repository.ts, usageTotals).
    pending: `select u.id::text, u.organization_id, b.processor_customer_id as customer_id, u.quantity::text, u.created_at as usage_at
              from usage_records u join billing_accounts b using (organization_id)
              where u.reported_at is null and u.deployment_id is null and u.unit = 'token' and u.quantity > 0
                and b.processor_customer_id is not null
                and exists (select 1 from prices p where p.resource_kind = 'hosted_model' and p.instance_type = u.model)
              order by u.id limit ?`,
  },
};

/** What one run reported. */
export type ReportTotals = Record<MeterName, number>;

/**
 * Reports closed GPU intervals and hosted-token usage records to the processor's meters, one meter
 * event per row, its identifier made from the row id: the processor counts an identifier once, so
 * a retried, concurrent or crashed run re-sends without counting twice. A row is marked reported
 * (`report_id`, `reported_at`) only after the processor accepted its event; a crash between the two
 * leaves it unmarked and the next run re-sends it under the same identifier.
 *
 * A refused report opens a `report_failed` anomaly for the organization and meter (the usage
 * summary's `open_anomalies`) and fails the job, which pg-boss retries with backoff; the next
 * accepted report of that organization and meter resolves it. Organizations with no processor
 * customer yet (payment never set up) are skipped: their usage waits, unreported, until they have one.
 */
export class UsageReporter {
  readonly #db: Knex;
  readonly #processor: PaymentProcessor;

  constructor(db: Knex, processor: PaymentProcessor) {
    this.#db = db;
    this.#processor = processor;
  }

  async run(log: Logger): Promise<ReportTotals> {
    const reported: ReportTotals = { gpu_instance_seconds: 0, hosted_tokens: 0 };
    let failures = 0;
    for (const meter of Object.keys(SOURCES) as MeterName[]) {
      // Batch after batch until none is left, or until a batch had failures (the retry takes it from there).
      for (;;) {
        const batch = await this.#pending(meter);
        if (!batch.length) break;
        const outcome = await this.#reportBatch(log, meter, batch);
        reported[meter] += outcome.reported;
        failures += outcome.failed;
        if (outcome.failed || batch.length < BATCH_SIZE) break;
      }
    }
    if (failures) throw new Error(`${failures} usage reports were refused by the payment processor; retried with backoff`);
    return reported;
  }

  async #pending(meter: MeterName): Promise<PendingUsage[]> {
    const { rows } = await this.#db.raw<{ rows: PendingUsage[] }>(SOURCES[meter].pending, [BATCH_SIZE]);
    return rows;
  }

  async #reportBatch(log: Logger, meter: MeterName, batch: PendingUsage[]): Promise<{ reported: number; failed: number }> {
    const source = SOURCES[meter];
    const accepted: PendingUsage[] = [];
    const failedOrganizations = new Map<number, { at: Date; detail: string }>();
    for (const usage of batch) {
      if (failedOrganizations.has(usage.organization_id)) continue;
      try {
        await this.#processor.reportMeterEvent({
          meter,
          customerId: usage.customer_id,
          value: Number(usage.quantity),
          identifier: source.identifier(usage.id),
          timestamp: usage.usage_at,
        });
        accepted.push(usage);
      } catch (error) {
        log.warn({ err: error, meter, organization_id: usage.organization_id }, 'a usage report was refused; the job retries it');
        failedOrganizations.set(usage.organization_id, { at: usage.usage_at, detail: error instanceof Error ? error.message : String(error) });
      }
    }
    await this.#db.transaction(async (trx) => {
      for (const usage of accepted) {
        await trx(source.table)
          .where({ id: usage.id })
          .whereNull('reported_at')
          .update({ report_id: source.identifier(usage.id), reported_at: trx.fn.now() });
      }
      const succeeded = [...new Set(accepted.map((usage) => usage.organization_id))].filter((id) => !failedOrganizations.has(id));
      if (succeeded.length) {
        await trx('usage_anomalies')
          .whereIn('organization_id', succeeded)
          .where({ meter, kind: 'report_failed' })
          .whereNull('gpu_usage_interval_id')
          .whereNull('resolved_at')
          .update({ resolved_at: trx.fn.now() });
      }
      for (const [organizationId, failure] of failedOrganizations) {
        await trx.raw(
          `insert into usage_anomalies (organization_id, meter, kind, detail, usage_at) values (?, ?, 'report_failed', ?, ?)
           on conflict (organization_id, meter) where kind = 'report_failed' and resolved_at is null and gpu_usage_interval_id is null
           do update set detail = excluded.detail`,
          [organizationId, meter, `The payment processor refused the report: ${failure.detail}`.slice(0, 500), failure.at],
        );
      }
    });
    return { reported: accepted.length, failed: batch.length - accepted.length };
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
