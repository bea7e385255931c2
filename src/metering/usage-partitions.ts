import type { Knex } from 'knex';
import type { JobDefinition } from '../jobs/queue.ts';

export const MAINTAIN_USAGE_PARTITIONS_QUEUE = 'maintain-usage-partitions';

/** Months made ahead of the current one: a missed day of the job, or a month of them, loses nothing. */
const MONTHS_AHEAD = 2;
const PARTITION_NAME = /^usage_records_(\d{4})_(\d{2})$/;

/** What one run of the maintenance did. */
export interface PartitionMaintenance {
  created: string[];
  dropped: string[];
  /** Partitions past the retention still holding billable usage not reported to the payment processor yet. */
  kept: string[];
}

/**
 * The monthly partitions of `usage_records` (migration 20261125200000): the current month's and the
 * next MONTHS_AHEAD are made (`ensure_usage_records_partition`, which also moves in rows the default
 * partition took for a month made late), and the months that ended more than `retentionMonths` ago
 * are dropped whole (no row-by-row delete, no bloat), each only once no billable usage in it waits
 * to be reported to the payment processor (when there is one): hosted-model tokens with a price and
 * no report yet, or claimed by a report the processor has not accepted. The usage summary reads
 * rollups (`usage_rollups`, kept) and, at the current period's edges, raw rows of at most the last
 * two months, which a retention of 2 or more keeps.
 */
export async function maintainUsagePartitions(
  db: Knex,
  options: { retentionMonths: number; reportsUsage: boolean; now?: Date },
): Promise<PartitionMaintenance> {
  const now = options.now ?? new Date();
  const thisMonth = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1);
  const created: string[] = [];
  for (let ahead = 0; ahead <= MONTHS_AHEAD; ahead++) {
    const month = monthsAfter(thisMonth, ahead);
    const { rows } = await db.raw<{ rows: [{ made: boolean }] }>('select ensure_usage_records_partition(?::date) as made', [isoDate(month)]);
    if (rows[0].made) created.push(partitionName(month));
  }
  const oldestKept = monthsAfter(thisMonth, -options.retentionMonths);
  const dropped: string[] = [];
  const kept: string[] = [];
  for (const partition of await monthlyPartitions(db)) {
    if (monthsAfter(partition.month, 1) > oldestKept) continue;
    if (await dropIfReported(db, partition.name, options.reportsUsage)) dropped.push(partition.name);
    else kept.push(partition.name);
  }
  return { created, dropped, kept };
}

/** The monthly partitions there are, oldest first (the default partition is never dropped). */
async function monthlyPartitions(db: Knex): Promise<Array<{ name: string; month: number }>> {
  const { rows } = await db.raw<{ rows: Array<{ name: string }> }>(
    `select c.relname as name from pg_inherits i join pg_class c on c.oid = i.inhrelid
     where i.inhparent = 'usage_records'::regclass order by c.relname`,
  );
  return rows.flatMap(({ name }) => {
    const match = PARTITION_NAME.exec(name);
    return match ? [{ name, month: Date.UTC(Number(match[1]), Number(match[2]) - 1, 1) }] : [];
  });
}

/**
 * Drops the partition unless billable usage in it still waits for the processor; the check and the
 * drop hold the partition's lock, so no report claims or sends its rows in between.
 */
async function dropIfReported(db: Knex, name: string, reportsUsage: boolean): Promise<boolean> {
  return db.transaction(async (trx) => {
    await trx.raw('lock table ?? in access exclusive mode', [name]);
    if (reportsUsage) {
      const { rows } = await trx.raw<{ rows: [{ waiting: boolean }] }>(
        `select exists (
           select 1 from ?? u
           where (u.usage_report_id is not null and u.reported_at is null)
              or (u.usage_report_id is null and u.deployment_id is null and u.unit = 'token' and u.quantity > 0
                  and exists (select 1 from prices p where p.resource_kind = 'hosted_model' and p.instance_type = u.model))
         ) as waiting`,
        [name],
      );
      if (rows[0].waiting) return false;
    }
    await trx.raw('drop table ??', [name]);
    return true;
  });
}

function monthsAfter(month: number, months: number): number {
  const date = new Date(month);
  return Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + months, 1);
}

const isoDate = (month: number) => new Date(month).toISOString().slice(0, 10);
const partitionName = (month: number) => `usage_records_${isoDate(month).slice(0, 7).replace('-', '_')}`;

/** Daily: next months' partitions made, expired months dropped. */
export function maintainUsagePartitionsJob(db: Knex, options: { retentionMonths: number; reportsUsage: boolean }): JobDefinition<object> {
  return {
    queue: MAINTAIN_USAGE_PARTITIONS_QUEUE,
    schedule: '23 0 * * *',
    policy: 'short',
    retryLimit: 5,
    retryDelaySeconds: 300,
    async handle(_data, { log }) {
      const outcome = await maintainUsagePartitions(db, options);
      if (outcome.created.length || outcome.dropped.length) log.info(outcome, 'usage partitions maintained');
      if (outcome.kept.length) log.warn({ kept: outcome.kept }, 'usage partitions past their retention still hold billable usage not reported yet; kept');
    },
  };
}
