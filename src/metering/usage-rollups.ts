import type { Knex } from 'knex';
import type { JobDefinition } from '../jobs/queue.ts';

export const COMPACT_USAGE_ROLLUPS_QUEUE = 'compact-usage-rollups';

/** Deltas folded per statement. */
const BATCH = 50_000;

/**
 * Folds the deltas the usage triggers appended (`usage_rollup_deltas`, migration 20261125200000)
 * into `usage_rollups`, one row per organization, meter, hour and item: each batch is deleted and
 * added in one statement, so a delta is counted once whether a fold runs, fails or races another
 * (rows another fold holds are skipped, and it adds them). The summary reads both tables, so its
 * totals are the same before and after. Returns the deltas folded.
 */
export async function compactUsageRollups(db: Knex): Promise<number> {
  let folded = 0;
  for (;;) {
    const { rows } = await db.raw<{ rows: [{ folded: number }] }>(
      `with taken as (
         delete from usage_rollup_deltas
         where id in (select id from usage_rollup_deltas order by id limit ? for update skip locked)
         returning organization_id, meter, hour, item, quantity
       ), added as (
         insert into usage_rollups (organization_id, meter, hour, item, quantity)
         select organization_id, meter, hour, item, sum(quantity) from taken
         group by 1, 2, 3, 4
         order by 1, 3, 2, 4
         on conflict (organization_id, hour, meter, item) do update set quantity = usage_rollups.quantity + excluded.quantity
       )
       select count(*)::int as folded from taken`,
      [BATCH],
    );
    folded += rows[0].folded;
    if (rows[0].folded < BATCH) return folded;
  }
}

/** Every minute: the deltas stay few, so the summary's read of them stays short. */
export function compactUsageRollupsJob(db: Knex): JobDefinition<object> {
  return {
    queue: COMPACT_USAGE_ROLLUPS_QUEUE,
    schedule: '* * * * *',
    policy: 'short',
    async handle(_data, { log }) {
      const folded = await compactUsageRollups(db);
      if (folded) log.debug({ folded }, 'usage rollup deltas folded');
    },
  };
}
