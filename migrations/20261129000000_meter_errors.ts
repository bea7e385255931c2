import type { Knex } from 'knex';

/**
 * Meter events Stripe accepted and then refused (issue 33 item 3): Stripe validates meter events
 * mostly asynchronously (an unknown customer, an invalid value, an archived meter) and says so later
 * in a `v1.billing.meter.error_report_triggered` event, naming sample events by identifier.
 * - `usage_reports.processor_error`: the error Stripe reported for the report's meter event (its
 *   code and message); the report was not counted.
 * - `usage_anomalies.kind` `meter_error`: an organization's usage the processor refused after
 *   accepting it; one open per organization and meter, for an operator (`billing reconcile`).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table usage_reports add column processor_error text check (length(processor_error) <= 1000);
    alter table usage_anomalies drop constraint usage_anomalies_kind_check,
      add constraint usage_anomalies_kind_check check (kind in ('report_failed', 'out_of_range', 'no_subscription', 'meter_error'));
    create unique index usage_anomalies_open_meter_error on usage_anomalies (organization_id, meter)
      where kind = 'meter_error' and resolved_at is null;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop index usage_anomalies_open_meter_error;
    delete from usage_anomalies where kind = 'meter_error';
    alter table usage_anomalies drop constraint usage_anomalies_kind_check,
      add constraint usage_anomalies_kind_check check (kind in ('report_failed', 'out_of_range', 'no_subscription'));
    alter table usage_reports drop column processor_error;
  `);
}
