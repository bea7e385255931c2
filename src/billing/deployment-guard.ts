import type { Knex } from 'knex';
import { countActiveDeployments } from '../deployments/deployments.repository.ts';
import { AppError } from '../errors.ts';
import { lockBillingAccount } from './billing.repository.ts';
import { usageSummary } from './usage-summary.ts';

/** Subscription states in which the processor charges the organization. */
const CHARGEABLE_SUBSCRIPTION = new Set(['active', 'trialing']);

export interface DeploymentGuardSettings {
  /** `BILLING_ENFORCEMENT`: payment setup is required to create a deployment (DESIGN.md §3). */
  enforcement: boolean;
}

/**
 * Every billing check on creating a deployment, in one place, run inside the creating transaction.
 * The billing account row is locked first, so two concurrent creates of an organization are checked
 * one after the other: the second sees the first's deployment (active limit) and the same spending.
 * Order: payment setup, then the active limit, then the spending limit (the costliest to compute).
 */
export async function assertMayCreateDeployment(trx: Knex.Transaction, organizationId: number, settings: DeploymentGuardSettings): Promise<void> {
  const account = await lockBillingAccount(trx, organizationId);
  if (!account) throw new AppError('PAYMENT_SETUP_INCOMPLETE', 'Your organization has no billing account.');
  if (settings.enforcement) {
    if (!account.default_payment_method_id) {
      throw new AppError('PAYMENT_SETUP_INCOMPLETE', 'Your organization has no default payment method; an admin adds a card under Billing, then try again.');
    }
    if (!account.subscription_status || !CHARGEABLE_SUBSCRIPTION.has(account.subscription_status)) {
      throw new AppError('PAYMENT_SETUP_INCOMPLETE', 'Your organization has no active subscription; an admin activates postpaid billing under Billing, then try again.');
    }
  }
  const active = await countActiveDeployments(trx, organizationId);
  if (active >= account.max_active_resources) {
    throw new AppError(
      'ACTIVE_DEPLOYMENT_LIMIT_REACHED',
      `Your organization has ${active} active deployments, its limit; delete one or ask to raise the limit.`,
    );
  }
  if (account.monthly_spending_limit !== null) {
    const summary = await usageSummary(trx, organizationId);
    const spentCents = summary.usage_totals.reduce((sum, total) => sum + toCents(total.estimated_amount), 0n);
    if (spentCents >= toCents(account.monthly_spending_limit)) {
      throw new AppError(
        'SPENDING_LIMIT_REACHED',
        `Your organization's estimated spending this period (${formatCents(spentCents)} ${summary.currency.toUpperCase()}) has reached its monthly limit of ${account.monthly_spending_limit}; an admin raises the limit, or wait for the next period.`,
      );
    }
  }
}

/** A decimal amount with at most 2 decimals (numeric(…, 2), or the summary's rounded amounts) in cents, exactly. */
function toCents(amount: string): bigint {
  const [whole = '0', fraction = ''] = amount.split('.');
  const negative = whole.startsWith('-');
  const cents = BigInt(whole.replace('-', '')) * 100n + BigInt((fraction + '00').slice(0, 2));
  return negative ? -cents : cents;
}

function formatCents(cents: bigint): string {
  return `${cents / 100n}.${String(cents % 100n).padStart(2, '0')}`;
}
