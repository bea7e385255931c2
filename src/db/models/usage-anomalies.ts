import { BaseModel } from '../base-model.ts';

/** `usage_anomalies`: usage flagged for review (a refused report, a quantity out of range) until resolved. */
export class UsageAnomalyRow extends BaseModel {
  static override tableName = 'usage_anomalies';
  declare id: string;
  declare organization_id: number;
  declare meter: 'gpu_instance_seconds' | 'hosted_tokens';
  declare service_key: string | null;
  declare kind: 'report_failed' | 'out_of_range' | 'no_subscription' | 'meter_error';
  declare detail: string;
  /** When the flagged usage happened: the billing period it counts in. */
  declare usage_at: Date;
  declare gpu_usage_interval_id: string | null;
  declare opened_at: Date;
  declare resolved_at: Date | null;
}
