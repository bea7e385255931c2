import type { Knex } from 'knex';

/**
 * Usage goes to the payment processor as amounts, priced per `service_key`
 * (src/billing/usage-reporting.ts):
 *
 * - `usage_reports`: one meter event per organization, meter and run, its value the claimed usage's
 *   exact amount in millionths of a dollar. `cumulative_amount` (exact, dollars) and
 *   `cumulative_micros` (its floor in millionths) run over all of the organization's reports of the
 *   meter, and `value` is the difference of the floors, so what the processor counts never drifts
 *   from the exact total by rounding, however small each report. The identifier the processor counts
 *   a report under is `usage_report_<id>`; `reported_at` is set once the processor accepted it.
 * - `gpu_usage_intervals.usage_report_id` / `usage_records.usage_report_id`: the report a row was
 *   claimed by (in the same transaction as the report's insert); `reported_at` still says when the
 *   processor accepted it. The per-row `report_id` identifiers of the first reporter are dropped.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table usage_reports (
      id bigint generated always as identity primary key,
      organization_id integer not null references organizations (id) on delete cascade,
      meter text not null check (meter in ('gpu_instance_seconds', 'hosted_tokens')),
      customer_id text not null,
      quantity numeric not null check (quantity >= 0),
      amount numeric not null check (amount >= 0),
      cumulative_amount numeric not null check (cumulative_amount >= amount),
      cumulative_micros bigint not null check (cumulative_micros >= 0),
      value bigint not null check (value >= 0),
      usage_at timestamptz not null,
      created_at timestamptz not null default now(),
      reported_at timestamptz
    );
    create index usage_reports_latest on usage_reports (organization_id, meter, id desc);
    create index usage_reports_unsent on usage_reports (meter, id) where reported_at is null;

    alter table gpu_usage_intervals
      drop column report_id,
      add column usage_report_id bigint references usage_reports (id) on delete set null;
    drop index gpu_usage_intervals_unreported;
    create index gpu_usage_intervals_unclaimed on gpu_usage_intervals (organization_id, id) where usage_report_id is null;
    create index gpu_usage_intervals_report on gpu_usage_intervals (usage_report_id) where usage_report_id is not null;

    alter table usage_records
      drop column report_id,
      add column usage_report_id bigint references usage_reports (id) on delete set null;
    drop index usage_records_unreported;
    create index usage_records_unclaimed on usage_records (organization_id, id) where usage_report_id is null and deployment_id is null;
    create index usage_records_report on usage_records (usage_report_id) where usage_report_id is not null;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop index usage_records_report;
    drop index usage_records_unclaimed;
    alter table usage_records drop column usage_report_id, add column report_id text unique;
    create index usage_records_unreported on usage_records (id) where reported_at is null and deployment_id is null;
    drop index gpu_usage_intervals_report;
    drop index gpu_usage_intervals_unclaimed;
    alter table gpu_usage_intervals drop column usage_report_id, add column report_id text unique;
    create index gpu_usage_intervals_unreported on gpu_usage_intervals (id) where reported_at is null;
    drop table usage_reports;
  `);
}
