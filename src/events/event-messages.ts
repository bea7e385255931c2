import type { DeploymentStatus } from '../deployments/deployment-states.ts';

/**
 * The sentence a status-change event carries for people: why an instance was chosen (to
 * `provisioning`), why it failed (to `failed`), otherwise what the new status means.
 */
export function statusChangeMessage(to: DeploymentStatus, details: { selectionReason?: string | null; failureReason?: string | null }): string {
  switch (to) {
    case 'requested':
      return 'The deployment was requested; provisioning starts in the background.';
    case 'provisioning':
      return details.selectionReason ?? 'An instance was chosen and its GPUs allocated.';
    case 'starting':
      return 'The serving engine accepted the launch and is loading the model.';
    case 'running':
      return 'Every replica is loaded and the model answers.';
    case 'failed':
      return details.failureReason ?? 'The deployment failed.';
    case 'terminating':
      return 'Termination started: the model is stopped on its engine, then its GPUs are freed.';
    case 'terminated':
      return 'The model is stopped and its GPUs are free.';
  }
}

/** The sentence of a loading-progress step. */
export function loadingMessage(progress: number): string {
  return `The engine is loading the model (${Math.round(progress * 100)}%).`;
}
