import type { components } from '../../generated/api.d.ts';

export type DeploymentStatus = components['schemas']['DeploymentStatus'];
export type FailureStage = components['schemas']['DeploymentFailureStage'];

/** Statuses that hold or may soon hold resources; they count against `max_active_resources`. */
export const ACTIVE_STATUSES: readonly DeploymentStatus[] = ['requested', 'provisioning', 'starting', 'running', 'terminating'];

/** The deployment state machine (DESIGN.md §3): every move a worker or a request may make. */
const TRANSITIONS: Record<DeploymentStatus, readonly DeploymentStatus[]> = {
  requested: ['provisioning', 'failed', 'terminating'],
  provisioning: ['starting', 'failed', 'terminating'],
  starting: ['running', 'failed', 'terminating'],
  running: ['failed', 'terminating'],
  failed: ['terminating'],
  terminating: ['terminated'],
  terminated: [],
};

export function canTransition(from: DeploymentStatus, to: DeploymentStatus): boolean {
  return TRANSITIONS[from].includes(to);
}

/** The statuses a deployment may be in for a move to `to`. */
export function sourcesOf(to: DeploymentStatus): DeploymentStatus[] {
  return (Object.keys(TRANSITIONS) as DeploymentStatus[]).filter((from) => TRANSITIONS[from].includes(to));
}
