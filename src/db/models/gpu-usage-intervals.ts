import { BaseModel } from '../base-model.ts';

/**
 * `gpu_usage_intervals`: GPU seconds of a deployment's replica, closed `[started_at, ended_at)` in
 * whole seconds; a replica's intervals never overlap (the table's constraints).
 */
export class GpuUsageIntervalRow extends BaseModel {
  static override tableName = 'gpu_usage_intervals';
  declare id: string;
  declare deployment_id: string;
  declare replica_id: string;
  declare organization_id: number;
  declare service_key: string;
  declare started_at: Date;
  declare ended_at: Date;
  /** Seconds in the interval (generated); bigint: read as a string. */
  declare quantity: string;
  /** The usage report that claimed the interval (`usage_reports`); null until claimed. */
  declare usage_report_id: string | null;
  declare reported_at: Date | null;
  declare created_at: Date;
}
