import type { Knex } from 'knex';
import { ACTIVE_STATUSES } from '../deployments/deployment-states.ts';

/**
 * Deployments of each status that holds or may soon hold resources: read from the partial index
 * `deployments_in_progress`, whose predicate is exactly these statuses, so a scrape stays cheap at
 * a million deployments (failed and terminated ones, which accumulate, are not counted: that would
 * read the whole table).
 */
export async function countActiveDeploymentsByStatus(db: Knex): Promise<Map<string, number>> {
  const rows = (await db('deployments').whereIn('status', ACTIVE_STATUSES).groupBy('status').select('status').count({ count: '*' })) as Array<{
    status: string;
    count: string | number;
  }>;
  return new Map(rows.map((row) => [row.status, Number(row.count)]));
}
