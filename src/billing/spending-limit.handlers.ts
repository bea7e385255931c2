import type { Knex } from 'knex';
import { requireOrganization } from '../principal.ts';
import type { Handlers } from '../http/types.ts';
import { BillingAccountRow } from '../db/models/billing-accounts.ts';

type SpendingLimitHandlers = Pick<Handlers, 'getSpendingLimit' | 'updateSpendingLimit'>;

/**
 * The organization's monthly spending limit (`/v1/billing/spending-limit`), read by any role and set
 * by admins (the router checks roles and CSRF from the document). The create guard
 * (src/billing/deployment-guard.ts) compares it with the period's estimated amount.
 */
export function spendingLimitHandlers(deps: { db: Knex }): SpendingLimitHandlers {
  const { db } = deps;
  const limitOf = (row: Pick<BillingAccountRow, 'monthly_spending_limit'> | undefined) => ({
    monthly_spending_limit: row?.monthly_spending_limit ?? null,
    currency: 'usd' as const,
  });
  return {
    getSpendingLimit: async (context) => {
      const organization = requireOrganization(context.auth);
      return { status: 200, body: limitOf(await BillingAccountRow.query(db).findOne({ organization_id: organization.id })) };
    },
    updateSpendingLimit: async (context) => {
      const organization = requireOrganization(context.auth);
      const [row] = await BillingAccountRow.query(db)
        .where({ organization_id: organization.id })
        .patch({ monthly_spending_limit: context.body.monthly_spending_limit })
        .returning('monthly_spending_limit');
      return { status: 200, body: limitOf(row) };
    },
  };
}
