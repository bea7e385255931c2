import type { Knex } from 'knex';
import { countActiveDeployments } from '../deployments/deployments.repository.ts';
import { AppError } from '../errors.ts';
import { lockBillingAccount } from './billing.repository.ts';

/**
 * Every billing check on creating a deployment, in one place, run inside the creating transaction.
 * The billing account row is locked, so two concurrent creates are counted one after the other.
 * (Payment setup and spending limits join here with the billing work.)
 */
export async function assertMayCreateDeployment(trx: Knex.Transaction, organizationId: number): Promise<void> {
  const account = await lockBillingAccount(trx, organizationId);
  if (!account) throw new AppError('PAYMENT_SETUP_INCOMPLETE', 'Your organization has no billing account.');
  const active = await countActiveDeployments(trx, organizationId);
  if (active >= account.max_active_resources) {
    throw new AppError(
      'ACTIVE_DEPLOYMENT_LIMIT_REACHED',
      `Your organization has ${active} active deployments, its limit; delete one or ask to raise the limit.`,
    );
  }
}
