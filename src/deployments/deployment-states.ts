import type { components } from '../../generated/api.d.ts';

export type DeploymentStatus = components['schemas']['DeploymentStatus'];
export type FailureStage = components['schemas']['DeploymentFailureStage'];

/**
 * What moves a deployment: the owner's request (`delete`), or the outcome of a provisioning step
 * (`placed`: an instance chosen and its GPUs allocated; `launched`: the engine took the launch;
 * `ready`: every replica ready; `fail`: a step failed for good or the engine lost the model;
 * `cleaned_up`: the engine confirmed the model gone and the GPUs were released).
 */
export type DeploymentEvent = 'placed' | 'launched' | 'ready' | 'fail' | 'delete' | 'cleaned_up';

/**
 * The deployment state machine: every allowed transition, and the only place that lists them.
 * `requested` → `provisioning` → `starting` → `running`; any of them → `failed`; DELETE →
 * `terminating` → `terminated`. Deleting a terminated deployment leaves it as it is; deleting one
 * that is terminating is refused until its cleanup has finished.
 */
const TRANSITIONS: { readonly [from in DeploymentStatus]: { readonly [event in DeploymentEvent]?: DeploymentStatus } } = {
  requested: { placed: 'provisioning', fail: 'failed', delete: 'terminating' },
  provisioning: { launched: 'starting', fail: 'failed', delete: 'terminating' },
  starting: { ready: 'running', fail: 'failed', delete: 'terminating' },
  running: { fail: 'failed', delete: 'terminating' },
  failed: { delete: 'terminating' },
  terminating: { cleaned_up: 'terminated' },
  terminated: { delete: 'terminated' },
};

const STATUSES = Object.keys(TRANSITIONS) as DeploymentStatus[];

/** The status `event` moves a deployment in `from` to, or null when the event is not allowed there. */
export function transition(from: DeploymentStatus, event: DeploymentEvent): DeploymentStatus | null {
  return TRANSITIONS[from][event] ?? null;
}

/** `transition` for a caller that checked the event is allowed in `from`: throws when it is not. */
export function nextStatus(from: DeploymentStatus, event: DeploymentEvent): DeploymentStatus {
  const to = transition(from, event);
  if (!to) throw new Error(`a deployment in ${from} cannot take the event ${event}`);
  return to;
}

/** Whether `event` is allowed in `status`. */
export function allows(status: DeploymentStatus, event: DeploymentEvent): boolean {
  return transition(status, event) !== null;
}

/** The statuses in which `event` is allowed (for a guarded update: `where status in (...)`). */
export function statusesAllowing(event: DeploymentEvent): DeploymentStatus[] {
  return STATUSES.filter((status) => allows(status, event));
}

/** The status in which a deployment serves inference. */
export const SERVING: DeploymentStatus = 'running';

/** Whether a deployment in `status` serves now or may still come to serve (a later transition reaches `running`). */
export function maySoonServe(status: DeploymentStatus): boolean {
  const seen = new Set<DeploymentStatus>();
  const pending = [status];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    if (next === SERVING) return true;
    if (seen.has(next)) continue;
    seen.add(next);
    pending.push(...Object.values(TRANSITIONS[next]));
  }
  return false;
}

/**
 * Whether `status` is final: nothing the platform does moves a deployment out of it, only its
 * owner's DELETE (`failed`, `terminated`). A deployment's event stream ends there.
 */
export function isFinal(status: DeploymentStatus): boolean {
  return Object.keys(TRANSITIONS[status]).every((event) => event === 'delete');
}

/** Statuses that hold or may soon hold resources; they count against `max_active_resources`. */
export const ACTIVE_STATUSES: readonly DeploymentStatus[] = ['requested', 'provisioning', 'starting', 'running', 'terminating'];

/**
 * A deployment's replica (docs/decisions/2026-11-29-elastic-deployments.md): one engine model on
 * GPUs of its own. `starting` from its placement until its model answers, `ready` while it serves,
 * `draining` while the requests it serves finish (it gets no new one), `stopping` until the engine
 * confirms its model gone, `stopped` once it is and its GPUs are released, `failed` when its model
 * failed and the engine has not confirmed it gone (its GPUs are still held: a cleanup is due).
 */
export type ReplicaStatus = 'starting' | 'ready' | 'draining' | 'stopping' | 'stopped' | 'failed';

/**
 * What moves a replica: its model answers (`ready`), the autoscaler takes it out of routing
 * (`drain`: the requests it serves finish), it is to be deleted (`stop`), its model failed
 * (`fail`), or the engine confirmed its model gone and its GPUs were released (`stopped`).
 */
export type ReplicaEvent = 'ready' | 'drain' | 'stop' | 'fail' | 'stopped';

/** A move of replicas: those in one of the statuses `from` go to `to`. */
export interface ReplicaMove {
  from: readonly ReplicaStatus[];
  to: ReplicaStatus;
}

/** The replica state machine: each event, the statuses that allow it and the one it leads to. */
const REPLICA_MOVES: { readonly [event in ReplicaEvent]: ReplicaMove } = {
  ready: { from: ['starting'], to: 'ready' },
  drain: { from: ['ready'], to: 'draining' },
  stop: { from: ['starting', 'ready', 'draining', 'failed'], to: 'stopping' },
  fail: { from: ['starting', 'ready', 'draining'], to: 'failed' },
  stopped: { from: ['starting', 'ready', 'draining', 'stopping', 'failed'], to: 'stopped' },
};

/** The move `event` makes of a replica. */
export function replicaMove(event: ReplicaEvent): ReplicaMove {
  return REPLICA_MOVES[event];
}

/** The statuses in which a replica holds GPUs it is billed for: from the moment it serves until it stops serving. */
export const METERED_REPLICA_STATUSES: readonly ReplicaStatus[] = ['ready', 'draining'];

/**
 * What a deployment's move does to its replicas: entering `running` makes them ready, a DELETE stops
 * them, a failure fails those still live, and `terminated` (the engine confirmed the models gone)
 * stops them, their GPUs released with the move. For now every replica moves with its deployment.
 */
const REPLICAS_ON_MOVE: { readonly [to in DeploymentStatus]?: ReplicaEvent } = { running: 'ready', terminating: 'stop', failed: 'fail', terminated: 'stopped' };

/** The replicas' move that goes with a deployment's move to `to`, if any. */
export function replicasOnMove(to: DeploymentStatus): ReplicaMove | undefined {
  const event = REPLICAS_ON_MOVE[to];
  return event && replicaMove(event);
}
