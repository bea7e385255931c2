import { BaseModel } from '../base-model.ts';

/**
 * `gpu_allocations`: GPUs of an instance booked for a deployment or a hosted model's launch (the GPU
 * ledger, src/clusters/gpu-ledger.ts); at most one `active` per holder.
 */
export class GpuAllocationRow extends BaseModel {
  static override tableName = 'gpu_allocations';
  declare id: string;
  declare deployment_id: string | null;
  declare hosted_model_endpoint_id: string | null;
  declare instance_id: string;
  declare gpu_count: number;
  declare status: 'active' | 'released';
  declare created_at: Date;
  declare released_at: Date | null;
}
