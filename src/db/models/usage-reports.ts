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
  declare created_at: Date;
  declare reported_at: Date | null;
}
