import { BaseModel } from '../base-model.ts';

/** `gpu_allocations`: GPUs of an instance booked for a deployment; at most one `active` per deployment. */
export class GpuAllocationRow extends BaseModel {
  static override tableName = 'gpu_allocations';
  declare id: string;
  declare deployment_id: string;
  declare instance_id: string;
  declare gpu_count: number;
  declare status: 'active' | 'released';
  declare created_at: Date;
  declare released_at: Date | null;
}
