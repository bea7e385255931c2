import { BaseModel } from '../base-model.ts';

/** `instances`: an engine worker of a cluster, recorded as an instance of an instance type (one per cluster and worker). */
export class InstanceRow extends BaseModel {
  static override tableName = 'instances';
  declare id: string;
  declare cluster_id: string;
  declare instance_type_id: string;
  /** The worker's address as the engine names it. */
  declare engine_worker: string;
  declare status: 'available' | 'unavailable';
  declare created_at: Date;
  declare updated_at: Date;
}
