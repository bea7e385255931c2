import type { Knex } from 'knex';

/**
 * Identifiers the payment processor keeps account-wide, made unique beyond this database (issue 33
 * item 2; shared/reviews/billing-stripe-fidelity-24d823e.md, finding 2). Stripe scopes idempotency
 * keys and meter event identifiers to the account, not to the database that sent them, so serials
 * (`usage_report_<id>`, `customer-org-<id>`) collided across two installations on one account and
 * with a database restored or recreated within a day.
 * - `installation`: one row, a random id made by the first process that needs it (not here: a
 *   database copied from a migrated template gets its own); it prefixes every identifier and
 *   idempotency key the service sends, so the processor shows which installation sent what.
 * - `billing_accounts.processor_key`: a random key per account, its customer's and subscriptions'
 *   idempotency keys (a restored database makes new ones for the accounts it lost).
 * - `usage_reports.identifier`: the meter event identifier of a report, random per report (reports
 *   made before keep the one they may have been sent under); `first_sent_at`: when it was first
 *   sent, which tells a refused repeat within the processor's uniqueness window from one after it.
 * - `usage_anomalies.kind` `no_subscription` (issue 33 item 4): usage of an organization whose
 *   customer has no live subscription, held unreported (Stripe accepts meter events for such a
 *   customer and never invoices them); one open per organization and meter.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table installation (
      singleton boolean primary key default true check (singleton),
      id text not null check (id ~ '^[0-9a-f]{16}$'),
      created_at timestamptz not null default now()
    );
    alter table billing_accounts add column processor_key uuid not null default gen_random_uuid();
    alter table usage_reports add column identifier text, add column first_sent_at timestamptz;
    update usage_reports set identifier = 'usage_report_' || id, first_sent_at = reported_at;
    alter table usage_reports alter column identifier set not null, add constraint usage_reports_identifier_key unique (identifier),
      add constraint usage_reports_identifier_length check (length(identifier) <= 100);
    alter table usage_anomalies drop constraint usage_anomalies_kind_check,
      add constraint usage_anomalies_kind_check check (kind in ('report_failed', 'out_of_range', 'no_subscription'));
    create unique index usage_anomalies_open_no_subscription on usage_anomalies (organization_id, meter)
      where kind = 'no_subscription' and resolved_at is null;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop index usage_anomalies_open_no_subscription;
    delete from usage_anomalies where kind = 'no_subscription';
    alter table usage_anomalies drop constraint usage_anomalies_kind_check,
      add constraint usage_anomalies_kind_check check (kind in ('report_failed', 'out_of_range'));
    alter table usage_reports drop column identifier, drop column first_sent_at;
    alter table billing_accounts drop column processor_key;
    drop table installation;
  `);
}
