import type { Knex } from 'knex';
import type { BillingAccountRow } from '../db/models/billing-accounts.ts';
import { findBillingAccount, lockBillingAccount } from './billing.repository.ts';
import { formatCents, toCents } from '../metering/money.ts';
import { usageSummary, type UsageSummary } from '../metering/usage-summary.ts';

/** Subscription states in which the processor charges the organization. */
const CHARGEABLE_SUBSCRIPTION = new Set(['active', 'trialing']);

export interface DeploymentGuardSettings {
  /** `BILLING_ENFORCEMENT`: payment setup is required to create a deployment (DESIGN.md §3). */
  enforcement: boolean;
}

export type DeploymentGuardName = 'payment_setup' | 'active_deployment_limit' | 'spending_limit';
export type DeploymentGuardCode = 'PAYMENT_SETUP_INCOMPLETE' | 'ACTIVE_DEPLOYMENT_LIMIT_REACHED' | 'SPENDING_LIMIT_REACHED';

/**
 * One guard's answer: `passed`, `refused` (with the 409 code and detail create answers), or
 * `not_checked` (billing enforcement off, or nothing to check it against). `detail` says why in one
 * sentence either way.
 */
export type DeploymentGuardVerdict =
  | { guard: DeploymentGuardName; verdict: 'passed' | 'not_checked'; code: null; detail: string }
  | { guard: DeploymentGuardName; verdict: 'refused'; code: DeploymentGuardCode; detail: string };

const passed = (guard: DeploymentGuardName, detail: string): DeploymentGuardVerdict => ({ guard, verdict: 'passed', code: null, detail });
const notChecked = (guard: DeploymentGuardName, detail: string): DeploymentGuardVerdict => ({ guard, verdict: 'not_checked', code: null, detail });
type Refusal = Extract<DeploymentGuardVerdict, { verdict: 'refused' }>;
const refused = (guard: DeploymentGuardName, code: DeploymentGuardCode, detail: string): Refusal => ({ guard, verdict: 'refused', code, detail });

/** What the guards decide from, read by `loadGuardInputs` or `lockGuardInputs`. */
export interface GuardInputs {
  account: BillingAccountRow | undefined;
  /** The spending of the period (one rounding per meter, as the invoice's), read only under a spending limit. */
  spent: { cents: bigint; currency: string } | undefined;
}

/** Reads what the guards decide from: the billing account and, under a spending limit, the period's spending. */
export async function loadGuardInputs(db: Knex, organizationId: number): Promise<GuardInputs> {
  return withSpending(db, organizationId, await findBillingAccount(db, organizationId));
}

/**
 * The same, the billing account locked first: create's check, so that two concurrent creates of an
 * organization are checked one after the other (the second sees the first's deployment and the
 * same spending).
 */
export async function lockGuardInputs(trx: Knex.Transaction, organizationId: number): Promise<GuardInputs> {
  return withSpending(trx, organizationId, await lockBillingAccount(trx, organizationId));
}

async function withSpending(db: Knex, organizationId: number, account: BillingAccountRow | undefined): Promise<GuardInputs> {
  if (!account || account.monthly_spending_limit === null) return { account, spent: undefined };
  const summary = await usageSummary(db, organizationId);
  return { account, spent: { cents: periodSpentCents(summary), currency: summary.currency } };
}

/**
 * Every billing check on creating a deployment, in one place: each guard's verdict, in the order
 * create applies them (payment setup, the active limit, then the spending limit). Create answers the
 * first refusal as its 409; a plan shows them all. A decision over loaded inputs: nothing is read.
 */
export function deploymentGuardVerdicts(inputs: GuardInputs, activeDeployments: number, settings: DeploymentGuardSettings): DeploymentGuardVerdict[] {
  const { account } = inputs;
  if (!account) {
    const none = 'Your organization has no billing account.';
    return [
      refused('payment_setup', 'PAYMENT_SETUP_INCOMPLETE', none),
      notChecked('active_deployment_limit', none),
      notChecked('spending_limit', none),
    ];
  }
  const activeLimit =
    activeDeployments >= account.max_active_resources
      ? refused(
          'active_deployment_limit',
          'ACTIVE_DEPLOYMENT_LIMIT_REACHED',
          `Your organization has ${activeDeployments} active deployments, its limit; delete one or ask to raise the limit.`,
        )
      : passed('active_deployment_limit', `Your organization has ${activeDeployments} of its ${account.max_active_resources} active deployments.`);
  return [paymentSetupVerdict(account, settings), activeLimit, spendingLimitVerdict(account, inputs.spent)];
}

function paymentSetupVerdict(account: BillingAccountRow, settings: DeploymentGuardSettings): DeploymentGuardVerdict {
  if (!settings.enforcement) return notChecked('payment_setup', 'Billing enforcement is off: creating a deployment needs no payment setup.');
  if (!account.default_payment_method_id) {
    return refused('payment_setup', 'PAYMENT_SETUP_INCOMPLETE', 'Your organization has no default payment method; an admin adds a card under Billing, then try again.');
  }
  if (!account.subscription_status || !CHARGEABLE_SUBSCRIPTION.has(account.subscription_status)) {
    return refused('payment_setup', 'PAYMENT_SETUP_INCOMPLETE', 'Your organization has no active subscription; an admin activates postpaid billing under Billing, then try again.');
  }
  return passed('payment_setup', 'Your organization has a default payment method and an active subscription.');
}

function spendingLimitVerdict(account: BillingAccountRow, spent: GuardInputs['spent']): DeploymentGuardVerdict {
  if (account.monthly_spending_limit === null) return passed('spending_limit', 'Your organization has no monthly spending limit.');
  if (!spent) throw new Error('the spending under a limit was not read');
  const amount = `${formatCents(spent.cents)} ${spent.currency.toUpperCase()}`;
  return spent.cents >= toCents(account.monthly_spending_limit)
    ? refused(
        'spending_limit',
        'SPENDING_LIMIT_REACHED',
        `Your organization's estimated spending this period (${amount}) has reached its monthly limit of ${account.monthly_spending_limit}; an admin raises the limit, or wait for the next period.`,
      )
    : passed('spending_limit', `Your organization's estimated spending this period (${amount}) is below its monthly limit of ${account.monthly_spending_limit}.`);
}

/**
 * What a hosted-model call needs under `BILLING_ENFORCEMENT`, as creating a deployment does: the
 * payment setup and room under the monthly spending limit (the active-deployment limit is about
 * deployments only). The first refusal, or undefined; nothing is checked with enforcement off.
 */
export function hostedCallRefusal(inputs: GuardInputs, settings: DeploymentGuardSettings): Refusal | undefined {
  if (!settings.enforcement) return undefined;
  const { account } = inputs;
  if (!account) return refused('payment_setup', 'PAYMENT_SETUP_INCOMPLETE', 'Your organization has no billing account.');
  return firstRefusal([paymentSetupVerdict(account, settings), spendingLimitVerdict(account, inputs.spent)]);
}

/**
 * Whether a deployment may take more GPUs (a replica added on load, or woken from zero): refused
 * once its organization's estimated spending has reached the monthly limit, as creating one is.
 */
export function scaleUpRefusal(inputs: GuardInputs): Refusal | undefined {
  if (!inputs.account) return undefined;
  const verdict = spendingLimitVerdict(inputs.account, inputs.spent);
  return verdict.verdict === 'refused' ? verdict : undefined;
}

/** The first refusal: what create answers (409), or undefined when every guard lets it through. */
export function firstRefusal(verdicts: readonly DeploymentGuardVerdict[]): Extract<DeploymentGuardVerdict, { verdict: 'refused' }> | undefined {
  return verdicts.find((verdict): verdict is Extract<DeploymentGuardVerdict, { verdict: 'refused' }> => verdict.verdict === 'refused');
}

/** The period's estimated spending (the summary's total: one rounding per meter, as the invoice's) in cents, exactly. */
export function periodSpentCents(summary: UsageSummary): bigint {
  return toCents(summary.estimated_total);
}
