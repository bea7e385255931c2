import type { Knex } from 'knex';
import { BillingAccountRow } from '../db/models/billing-accounts.ts';

/** Every query of the billing area: billing accounts, spending limits and their alerts. */
type Db = Knex | Knex.Transaction;

export async function insertBillingAccount(db: Db, account: Pick<BillingAccountRow, 'organization_id' | 'max_active_resources'>): Promise<void> {
  await BillingAccountRow.query(db).insert(account);
}

/** The organization's billing account, locked until the transaction ends (concurrent checks queue behind it). */
export async function lockBillingAccount(trx: Knex.Transaction, organizationId: number): Promise<BillingAccountRow | undefined> {
  return BillingAccountRow.query(trx).where({ organization_id: organizationId }).forUpdate().first();
}

// ---- prices

export async function findBillingAccount(db: Db, organizationId: number): Promise<BillingAccountRow | undefined> {
  return BillingAccountRow.query(db).findOne({ organization_id: organizationId });
}

/** The organizations with a monthly spending limit. */
export async function organizationsWithSpendingLimit(db: Db): Promise<number[]> {
  return (await BillingAccountRow.query(db).whereNotNull('monthly_spending_limit').select('organization_id')).map((row) => row.organization_id);
}

/**
 * Records the spending alerts of the period at these thresholds, each once per period (two workers
 * checking at once record it once): the thresholds recorded now.
 */
export async function recordSpendingAlerts(
  trx: Knex.Transaction,
  alert: { organizationId: number; periodStart: string; thresholds: readonly number[]; spent: string; limit: string },
): Promise<number[]> {
  const rows: Array<{ threshold_percent: number }> = await trx('spending_alerts')
    .insert(alert.thresholds.map((percent) => ({ organization_id: alert.organizationId, period_start: alert.periodStart, threshold_percent: percent, spent: alert.spent, spending_limit: alert.limit })))
    .onConflict(['organization_id', 'period_start', 'threshold_percent'])
    .ignore()
    .returning('threshold_percent');
  return rows.map((row) => row.threshold_percent);
}

/** Sets the organization's monthly spending limit (null: none); the limit as stored, undefined without an account. */
export async function setSpendingLimit(db: Db, organizationId: number, limit: string | null): Promise<string | null | undefined> {
  const [row] = await BillingAccountRow.query(db).where({ organization_id: organizationId }).patch({ monthly_spending_limit: limit }).returning('monthly_spending_limit');
  return row === undefined ? undefined : row.monthly_spending_limit;
}
