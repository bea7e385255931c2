import type { Knex } from 'knex';

/**
 * Invoices one can answer questions about (issue 33 item 10): the number, the lines (description,
 * quantity, amount, price and period of each), the subtotal, the tax and the total, as the
 * processor has them. Rows stored before keep nulls and no lines until they are synced again (a
 * webhook, or the backfill from the processor's list: `billing invoices`, the daily reconciliation).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table invoices
      add column number text,
      add column subtotal bigint,
      add column tax bigint check (tax >= 0),
      add column total bigint,
      add column lines jsonb not null default '[]' check (jsonb_typeof(lines) = 'array');
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('alter table invoices drop column number, drop column subtotal, drop column tax, drop column total, drop column lines');
}
