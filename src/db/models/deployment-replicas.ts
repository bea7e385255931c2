import type { ReplicaStatus } from '../../deployments/deployment-states.ts';
import { BaseModel } from '../base-model.ts';

/**
 * `deployment_replicas`: a deployment's replica, one engine model on GPUs of its own booked in the
 * ledger; its status follows the replica state machine of `src/deployments/deployment-states.ts`.
 * Its GPU seconds are metered from the second it serves until the second it stops serving
 * (src/metering/gpu-metering.ts).
 */
export class DeploymentReplicaRow extends BaseModel {
  static override tableName = 'deployment_replicas';
  declare id: string;
  declare deployment_id: string;
  /** The deployment's organization (it never changes). */
  declare organization_id: number;
  /** 0 for the deployment's first replica; unique within the deployment. */
  declare ordinal: number;
  /** The engine's id of the replica's model, fixed by the deployment id and the ordinal. */
  declare engine_model_uid: string;
  /** Its GPUs in the ledger (`gpu_allocations`), kept once released. */
  declare gpu_allocation_id: string;
  declare status: ReplicaStatus;
  declare created_at: Date;
  /** When it first served. */
  declare ready_at: Date | null;
  /** When it stopped taking new requests (`draining`); null before. */
  declare draining_since: Date | null;
  /** When the engine confirmed its model gone and its GPUs were released. */
  declare stopped_at: Date | null;
  /** The whole second it entered `ready` (written with that status change); null if it never served. */
  declare running_since: Date | null;
  /** The whole second it stopped serving; null while it serves or if it never did. */
  declare running_until: Date | null;
  /** How far its GPU seconds are closed in `gpu_usage_intervals`; null before the first interval. */
  declare accrued_until: Date | null;
  /** The price row's key of its GPUs, written when it entered `ready` (or by the GPU meter, when that made the price row). */
  declare gpu_service_key: string | null;
}
