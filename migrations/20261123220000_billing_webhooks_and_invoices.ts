import type { Knex } from 'knex';

/**
 * The payment processor's webhooks and invoices (docs/billing.md, Payments):
 *
 * - `billing_webhook_events`: each verified event id once (a replay finds its id and does nothing);
 *   `processed_at` is set by the job that re-reads the event's object from the processor.
 * - `invoices`: the organization's invoices as last read from the processor (written by that job on
 *   `invoice.*` events), one row per processor invoice id.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table billing_webhook_events (
      id text primary key,
      type text not null,
      object_type text not null,
      object_id text not null,
      customer_id text,
      received_at timestamptz not null default now(),
      processed_at timestamptz
    );

    create table invoices (
      processor_invoice_id text primary key,
      billing_account_id integer not null references billing_accounts (id) on delete cascade,
      status text not null,
      collection_method text not null check (collection_method in ('charge_automatically', 'send_invoice')),
      amount_due bigint not null check (amount_due >= 0),
      amount_paid bigint not null check (amount_paid >= 0),
      currency text not null,
      hosted_invoice_url text,
      invoice_pdf text,
      due_date timestamptz,
      period_start timestamptz not null,
      period_end timestamptz not null,
      created timestamptz not null,
      synced_at timestamptz not null default now()
    );
    create index invoices_account_created on invoices (billing_account_id, created desc);
    create unique index billing_accounts_processor_customer on billing_accounts (processor_customer_id);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop index billing_accounts_processor_customer;
    drop table invoices;
    drop table billing_webhook_events;
  `);
}
