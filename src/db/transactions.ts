import { setTimeout as delay } from 'node:timers/promises';
import type { Knex } from 'knex';

/**
 * SQLSTATEs of a transaction Postgres rolled back because it collided with another one, not because
 * of what it asked: a deadlock it was chosen to break (40P01), or a serialization failure (40001).
 * The same transaction run again from the start may well succeed.
 */
const CONFLICTS = new Set(['40P01', '40001']);

/** True when a query failed on a deadlock or a serialization failure (whether knex or objection raised it). */
export function isTransactionConflict(error: unknown): boolean {
  const cause = ((error as { nativeError?: unknown } | undefined)?.nativeError ?? error) as { code?: unknown } | undefined;
  return typeof cause?.code === 'string' && CONFLICTS.has(cause.code);
}

/** How many times a transaction runs at most before its conflict is thrown to the caller. */
export const TRANSACTION_ATTEMPTS = 5;

/**
 * Runs `work` in a transaction of its own, and runs it again from the start, in a new transaction,
 * when Postgres rolled it back on a deadlock or a serialization failure: at most `attempts` runs,
 * a short random pause before each retry (so two transactions that collided do not collide again
 * in step). Any other error is thrown at once. `work` must do nothing but database work in `trx`,
 * since a retried run repeats all of it.
 *
 * On a transaction (`db` is one), `work` runs in it once: a conflict rolls back the whole
 * transaction, so only whoever opened it can run it again.
 */
export async function retryingTransaction<T>(db: Knex, work: (trx: Knex.Transaction) => Promise<T>, options: { attempts?: number } = {}): Promise<T> {
  if ((db as Knex.Transaction).isTransaction) return work(db as Knex.Transaction);
  const attempts = options.attempts ?? TRANSACTION_ATTEMPTS;
  for (let attempt = 1; ; attempt++) {
    try {
      return await db.transaction(work);
    } catch (error) {
      if (attempt >= attempts || !isTransactionConflict(error)) throw error;
      await delay(Math.round(Math.random() * 20 * attempt));
    }
  }
}
