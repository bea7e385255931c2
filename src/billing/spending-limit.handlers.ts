import type { Knex } from 'knex';
import { requireOrganization } from '../principal.ts';
import type { Handlers } from '../http/types.ts';
import { findBillingAccount, setSpendingLimit } from './billing.repository.ts';

type SpendingLimitHandlers = Pick<Handlers, 'getSpendingLimit' | 'updateSpendingLimit'>;

/**
 * The organization's monthly spending limit (`/v1/billing/spending-limit`), read by any role and set
 * by admins (the router checks roles and CSRF from the document). The create guard
 * (src/billing/deployment-guard.ts) compares it with the period's estimated amount.
 */
export function spendingLimitHandlers(deps: { db: Knex }): SpendingLimitHandlers {
  const { db } = deps;
  const limitOf = (limit: string | null | undefined) => ({ monthly_spending_limit: limit ?? null, currency: 'usd' as const });
  return {
    getSpendingLimit: async (context) => {
      const organization = requireOrganization(context.auth);
      return { status: 200, body: limitOf((await findBillingAccount(db, organization.id))?.monthly_spending_limit) };
    },
    updateSpendingLimit: async (context) => {
      const organization = requireOrganization(context.auth);
      return { status: 200, body: limitOf(await setSpendingLimit(db, organization.id, context.body.monthly_spending_limit ?? null)) };
    },
  };
}
