import type { components } from '../../../generated/api.d.ts';
import { BaseModel } from '../base-model.ts';

/** `deployments`: a model deployed for a user of an organization; its status follows `src/deployments/deployment-states.ts`. */
export class DeploymentRow extends BaseModel {
  static override tableName = 'deployments';
  declare id: string;
  declare user_id: number;
  declare organization_id: number;
  declare deployable_model_id: string;
  declare model_name: string;
  declare model_format: string;
  /** numeric(8, 2): read as a string. */
  declare model_size_in_billions: string;
  declare quantization: string;
  declare model_engine: string;
  declare status: components['schemas']['DeploymentStatus'];
  declare cluster_id: string | null;
  declare instance_id: string | null;
  declare gpu_allocation_id: string | null;
  /** The engine's id of its first replica's model (`deployment_replicas`), fixed by the deployment id once placed. */
  declare engine_model_uid: string | null;
  declare selected_instance_type: string | null;
  declare selection_reason: string | null;
  declare failure_stage: components['schemas']['DeploymentFailureStage'] | null;
  declare failure_reason: string | null;
  declare status_changed_at: Date;
  /** When the engine first reported this running model not ready (auto-recovery); null when healthy. */
  declare engine_unhealthy_since: Date | null;
  /** The fewest replicas it keeps (0: it scales to zero when idle). */
  declare min_replicas: number;
  /** The most replicas the autoscaler adds. */
  declare max_replicas: number;
  /** Requests in flight per replica the autoscaler aims at. */
  declare target_concurrency: number;
  /** With `min_replicas` 0: seconds without a request before the last replica is released. */
  declare scale_to_zero_after_seconds: number;
  /** The instance type asked for at creation; null when the platform chooses. */
  declare instance_type: string | null;
  /** How many replicas the autoscaler wants now (src/deployments/scaling.ts). */
  declare desired_replicas: number;
  declare created_at: Date;
  declare updated_at: Date;
  declare terminated_at: Date | null;
}

/**
 * A SQL condition: the deployment (under `alias`, if any) is not terminated. Spelled as the
 * predicate of the partial index `deployments_live_by_organization`, with a literal rather than a
 * bound value, so the planner matches the index whatever the plan's parameters.
 */
export function notTerminatedSql(alias?: string): string {
  return `${alias ? `${alias}.` : ''}status <> 'terminated'`;
}
