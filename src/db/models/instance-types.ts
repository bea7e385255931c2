import { BaseModel } from '../base-model.ts';

/** `instance_types`: a kind of GPU machine and its price. */
export class InstanceTypeRow extends BaseModel {
  static override tableName = 'instance_types';
  declare id: string;
  declare name: string;
  declare provider: string;
  declare gpu_type: string;
  declare gpu_count: number;
  declare gpu_memory_gb: number;
  /** numeric(14, 9): read as a string. */
  declare price_per_second: string;
  declare currency: string;
  declare created_at: Date;
}
