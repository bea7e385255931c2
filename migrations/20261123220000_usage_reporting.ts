import type { Knex } from 'knex';

/**
 * Reporting usage to the payment processor's meters (src/billing/usage-reporting.ts):
 *
 * - `usage_records.report_id` / `reported_at`: the meter event identifier a hosted-token record was
 *   accepted under, and when, like `gpu_usage_intervals` has them;
 * - at most one open `report_failed` anomaly per organization and meter: a failing report opens it,
 *   later failures keep it open, the next accepted report resolves it.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table usage_records
      add column report_id text unique,
      add column reported_at timestamptz;
    create index usage_records_unreported on usage_records (id) where reported_at is null and deployment_id is null;
    create unique index usage_anomalies_open_report_failed on usage_anomalies (organization_id, meter)
      where kind = 'report_failed' and resolved_at is null and gpu_usage_interval_id is null;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop index usage_anomalies_open_report_failed;
    alter table usage_records drop column report_id, drop column reported_at;
  `);
}
