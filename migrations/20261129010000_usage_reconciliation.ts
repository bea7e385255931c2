import type { Knex } from 'knex';

/**
 * Reconciliation with the payment processor (issue 33 items 3 and 10), and one currency.
 * - `usage_differences`: a day (UTC) of a customer's meter where the processor's meter event
 *   summary differs from the values of the reports marked counted (and corrections sent); found by
 *   the daily `reconcile-usage` job, shown and fixed by the operator's `billing reconcile`. One open
 *   per customer, meter and day; resolved when the figures agree again or by the operator.
 * - `usage_corrections`: what an operator's fix sent for a difference, by the written rule: a meter
 *   event (what a period not invoiced yet misses), an invoice item on the next invoice (what an
 *   invoiced period missed) or a credit note (what an invoice charged too much); each under its
 *   own identifier (the meter event's, or the idempotency key).
 * - `prices.currency` is `usd` only: every meter reports amounts in millionths of a US dollar into
 *   one USD price per meter, so a price in another currency would be invoiced as dollars. A second
 *   currency needs its own meters and prices and a subscription per currency (not built).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table usage_differences (
      id bigserial primary key,
      organization_id integer not null references organizations (id) on delete cascade,
      customer_id text not null,
      meter text not null check (meter in ('gpu_instance_seconds', 'hosted_tokens')),
      day date not null,
      reported bigint not null,
      at_processor bigint not null,
      found_at timestamptz not null default now(),
      checked_at timestamptz not null default now(),
      resolved_at timestamptz,
      resolution text check (length(resolution) <= 500),
      check (reported <> at_processor or resolved_at is not null)
    );
    create unique index usage_differences_open on usage_differences (customer_id, meter, day) where resolved_at is null;
    create index usage_differences_organization on usage_differences (organization_id, day);

    create table usage_corrections (
      id bigserial primary key,
      difference_id bigint not null references usage_differences (id) on delete cascade,
      organization_id integer not null references organizations (id) on delete cascade,
      customer_id text not null,
      meter text not null check (meter in ('gpu_instance_seconds', 'hosted_tokens')),
      day date not null,
      kind text not null check (kind in ('meter_event', 'invoice_item', 'credit_note')),
      value bigint not null check (value <> 0),
      amount_cents bigint,
      identifier text not null unique check (length(identifier) <= 100),
      processor_object_id text,
      created_at timestamptz not null default now(),
      sent_at timestamptz
    );
    create index usage_corrections_customer on usage_corrections (customer_id, meter, day);

    alter table prices add constraint prices_currency_usd check (currency = 'usd');
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table prices drop constraint prices_currency_usd;
    drop table usage_corrections;
    drop table usage_differences;
  `);
}
