import type { components } from '../../../generated/api.d.ts';
import { BaseModel } from '../base-model.ts';

/** What a `deployment.scaled` event records (stored as jsonb). */
export interface DeploymentScale {
  from: number;
  to: number;
  reason: 'load' | 'idle' | 'request' | 'settings' | 'capacity_shortfall' | 'spending_limit' | 'replica_failed';
}

/** `deployment_events`: the log of a deployment's status changes, provisioning steps, scale actions and engine events (src/events/). */
export class DeploymentEventRow extends BaseModel {
  static override tableName = 'deployment_events';
  /** bigint: read as a string. */
  declare id: string;
  declare deployment_id: string;
  declare organization_id: number;
  declare type: components['schemas']['DeploymentEventType'];
  declare from_status: components['schemas']['DeploymentStatus'] | null;
  declare to_status: components['schemas']['DeploymentStatus'];
  declare step: components['schemas']['ProvisioningStep'] | null;
  /** 0 to 1. */
  declare progress: number | null;
  declare failure_stage: components['schemas']['DeploymentFailureStage'] | null;
  declare message: string | null;
  /** On a `deployment.scaled` event: the desired replicas before and after, and why. */
  declare scale: DeploymentScale | null;
  /** On a `deployment.engine_event` event: the engine event's level, its time by the engine's clock, and the replica's ordinal. */
  declare engine_level: components['schemas']['EngineEventLevel'] | null;
  declare engine_occurred_at: Date | null;
  declare engine_replica: number | null;
  declare created_at: Date;
}
