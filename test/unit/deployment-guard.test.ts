import { describe, expect, it } from 'vitest';
import { deploymentGuardVerdicts, firstRefusal, hostedCallRefusal, type GuardInputs } from '../../src/billing/deployment-guard.ts';
import { BillingAccountRow } from '../../src/db/models/billing-accounts.ts';

/** A billing account with a card and an active subscription, 5 active deployments allowed, no spending limit. */
function account(changes: Partial<BillingAccountRow> = {}): BillingAccountRow {
  return Object.assign(new BillingAccountRow(), {
    default_payment_method_id: 'pm_1',
    subscription_status: 'active',
    max_active_resources: 5,
    monthly_spending_limit: null,
    ...changes,
  });
}

const ENFORCED = { enforcement: true };
const spent = (cents: bigint) => ({ cents, currency: 'usd' });
const verdicts = (inputs: GuardInputs, active = 0, settings = ENFORCED) => deploymentGuardVerdicts(inputs, active, settings).map((v) => [v.guard, v.verdict, v.code]);

describe('the billing guards on creating a deployment', () => {
  it('lets a set-up organization under its limits through, each guard saying why', () => {
    expect(verdicts({ account: account(), spent: undefined }, 4)).toEqual([
      ['payment_setup', 'passed', null],
      ['active_deployment_limit', 'passed', null],
      ['spending_limit', 'passed', null],
    ]);
    expect(deploymentGuardVerdicts({ account: account(), spent: undefined }, 4, ENFORCED)[1]?.detail).toBe('Your organization has 4 of its 5 active deployments.');
  });

  it('refuses without a card or a chargeable subscription, only under enforcement', () => {
    expect(firstRefusal(deploymentGuardVerdicts({ account: account({ default_payment_method_id: null }), spent: undefined }, 0, ENFORCED))?.code).toBe('PAYMENT_SETUP_INCOMPLETE');
    expect(firstRefusal(deploymentGuardVerdicts({ account: account({ subscription_status: 'past_due' }), spent: undefined }, 0, ENFORCED))?.code).toBe('PAYMENT_SETUP_INCOMPLETE');
    expect(verdicts({ account: account({ subscription_status: 'trialing' }), spent: undefined })[0]).toEqual(['payment_setup', 'passed', null]);
    expect(verdicts({ account: account({ default_payment_method_id: null }), spent: undefined }, 0, { enforcement: false })[0]).toEqual(['payment_setup', 'not_checked', null]);
  });

  it('refuses at the active limit, not below it', () => {
    expect(verdicts({ account: account(), spent: undefined }, 5)[1]).toEqual(['active_deployment_limit', 'refused', 'ACTIVE_DEPLOYMENT_LIMIT_REACHED']);
    expect(verdicts({ account: account(), spent: undefined }, 4)[1]?.[1]).toBe('passed');
  });

  it('refuses once the period’s spending reaches the limit, to the cent', () => {
    const limited = account({ monthly_spending_limit: '10.00' });
    expect(verdicts({ account: limited, spent: spent(999n) })[2]).toEqual(['spending_limit', 'passed', null]);
    const refusal = deploymentGuardVerdicts({ account: limited, spent: spent(1000n) }, 0, ENFORCED)[2];
    expect(refusal).toMatchObject({ verdict: 'refused', code: 'SPENDING_LIMIT_REACHED' });
    expect(refusal?.detail).toContain('(10.00 USD) has reached its monthly limit of 10.00');
  });

  it('refuses everything, checking nothing more, without a billing account', () => {
    expect(verdicts({ account: undefined, spent: undefined })).toEqual([
      ['payment_setup', 'refused', 'PAYMENT_SETUP_INCOMPLETE'],
      ['active_deployment_limit', 'not_checked', null],
      ['spending_limit', 'not_checked', null],
    ]);
  });

  it('takes a spending limit with no spending read for a mistake, not a pass', () => {
    expect(() => deploymentGuardVerdicts({ account: account({ monthly_spending_limit: '1.00' }), spent: undefined }, 0, ENFORCED)).toThrow('not read');
  });
});

describe('the guards on a hosted-model call', () => {
  it('asks the payment setup and the spending limit under enforcement, not the active limit', () => {
    expect(hostedCallRefusal({ account: account(), spent: undefined }, ENFORCED)).toBeUndefined();
    expect(hostedCallRefusal({ account: account({ max_active_resources: 0 }), spent: undefined }, ENFORCED)).toBeUndefined();
    expect(hostedCallRefusal({ account: account({ monthly_spending_limit: '0.50' }), spent: spent(50n) }, ENFORCED)?.code).toBe('SPENDING_LIMIT_REACHED');
    expect(hostedCallRefusal({ account: undefined, spent: undefined }, ENFORCED)?.code).toBe('PAYMENT_SETUP_INCOMPLETE');
  });

  it('checks nothing with enforcement off', () => {
    expect(hostedCallRefusal({ account: undefined, spent: undefined }, { enforcement: false })).toBeUndefined();
  });
});
