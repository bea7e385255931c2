import type { Knex } from 'knex';
import type { PgBoss } from 'pg-boss';
import { enqueue } from '../jobs/queue.ts';

/** The job that brings a deployment's replicas to its `desired_replicas` (src/deployments/scaling.ts). */
export const SCALE_QUEUE = 'scale-deployment';

/** Asks for the deployment's replicas to be brought to its desired count, in the caller's transaction (one queued at a time per deployment). */
export async function requestScale(boss: PgBoss, trx: Knex.Transaction, deploymentId: string): Promise<void> {
  await enqueue(boss, trx, SCALE_QUEUE, { deploymentId }, { singletonKey: deploymentId });
}
