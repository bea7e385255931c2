import { BaseModel } from '../base-model.ts';

/**
 * `usage_reports`: one meter event sent to the payment processor for an organization's claimed usage
 * of a meter, its value in millionths of a dollar (src/billing/usage-reporting.ts). Numerics and
 * bigints are read as strings.
 */
export class UsageReportRow extends BaseModel {
  static override tableName = 'usage_reports';
  declare id: string;
  declare organization_id: number;
  declare meter: 'gpu_instance_seconds' | 'hosted_tokens';
  declare customer_id: string;
  /** Seconds or tokens the report covers. */
  declare quantity: string;
  /** Their exact amount, in dollars. */
  declare amount: string;
  declare cumulative_amount: string;
  declare cumulative_micros: string;
  /** What the meter event carries: millionths of a dollar. */
  declare value: string;
  declare usage_at: Date;
  /** The meter event's identifier: the installation's id and a random one (`usage_report_<id>` for reports made before). */
  declare identifier: string;
  declare created_at: Date;
  /** When it was first sent: a refused repeat within the processor's uniqueness window means it was counted. */
  declare first_sent_at: Date | null;
  declare reported_at: Date | null;
}
