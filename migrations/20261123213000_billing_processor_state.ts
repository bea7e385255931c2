import type { Knex } from 'knex';

/**
 * The payment processor's state of a billing account, as the service last read it (webhooks re-read
 * the object from the processor and store it here), and the organization's spending limit:
 *
 * - `default_payment_method_id`: the customer's `invoice_settings.default_payment_method`;
 * - `monthly_spending_limit`: USD per billing period set by an admin, null for none; the create guard
 *   compares it with the period's estimated amount (`SPENDING_LIMIT_REACHED`);
 * - `processor_synced_at`: when the processor's state was last read into this row.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table billing_accounts
      add column default_payment_method_id text,
      add column monthly_spending_limit numeric(14, 2) check (monthly_spending_limit >= 0),
      add column processor_synced_at timestamptz;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table billing_accounts
      drop column default_payment_method_id,
      drop column monthly_spending_limit,
      drop column processor_synced_at;
  `);
}
