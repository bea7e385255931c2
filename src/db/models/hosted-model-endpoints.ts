import { BaseModel } from '../base-model.ts';

/** `hosted_model_endpoints`: a hosted catalog model launched on a hosted cluster; it serves while `running`. */
export class HostedModelEndpointRow extends BaseModel {
  static override tableName = 'hosted_model_endpoints';
  declare id: string;
  declare model_name: string;
  declare cluster_id: string;
  declare engine_model_uid: string;
  /** The instance (engine worker) the launch was placed on; its GPUs are in `gpu_allocations`. */
  declare instance_id: string | null;
  declare state: 'launching' | 'running' | 'failed';
  declare state_reason: string | null;
  /** Since when the engine has reported the running model not ready (auto-recovery); null while it serves. */
  declare engine_unhealthy_since: Date | null;
  declare created_at: Date;
  declare updated_at: Date;
}
