import type { Knex } from 'knex';
import { ACTIVE_STATUSES } from '../deployments/deployment-states.ts';
import { AppError } from '../errors.ts';

/**
 * Every billing check on creating a deployment, in one place, run inside the creating transaction.
 * The billing account row is locked, so two concurrent creates are counted one after the other.
 * (Payment setup and spending limits join here with the billing work.)
 */
export async function assertMayCreateDeployment(trx: Knex.Transaction, organizationId: number): Promise<void> {
  const account = await trx('billing_accounts').where({ organization_id: organizationId }).forUpdate().first('max_active_resources');
  if (!account) throw new AppError('PAYMENT_SETUP_INCOMPLETE', 'Your organization has no billing account.');
  const counted = await trx('deployments').where({ organization_id: organizationId }).whereIn('status', ACTIVE_STATUSES).count({ active: '*' });
  const active = Number(counted[0]?.active ?? 0);
  if (active >= account.max_active_resources) {
    throw new AppError(
      'ACTIVE_DEPLOYMENT_LIMIT_REACHED',
      `Your organization has ${active} active deployments, its limit; delete one or ask to raise the limit.`,
    );
  }
}
