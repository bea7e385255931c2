import type { components } from '../../generated/api.d.ts';

export type DeploymentStatus = components['schemas']['DeploymentStatus'];
export type FailureStage = components['schemas']['DeploymentFailureStage'];

/** Statuses that hold or may soon hold resources; they count against `max_active_resources`. */
export const ACTIVE_STATUSES: readonly DeploymentStatus[] = ['requested', 'provisioning', 'starting', 'running', 'terminating'];
