import type { Knex } from 'knex';
import { BillingAccountRow } from '../db/models/billing-accounts.ts';

/** Every query of the billing area: billing accounts. */
type Db = Knex | Knex.Transaction;

export async function insertBillingAccount(db: Db, account: Pick<BillingAccountRow, 'organization_id' | 'max_active_resources'>): Promise<void> {
  await BillingAccountRow.query(db).insert(account);
}

/** The organization's billing account, locked until the transaction ends (concurrent checks queue behind it). */
export async function lockBillingAccount(trx: Knex.Transaction, organizationId: number): Promise<BillingAccountRow | undefined> {
  return BillingAccountRow.query(trx).where({ organization_id: organizationId }).forUpdate().first();
}
