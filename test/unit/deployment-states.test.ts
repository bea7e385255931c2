import { describe, expect, it } from 'vitest';
import {
  ACTIVE_STATUSES,
  allows,
  isFinal,
  maySoonServe,
  nextStatus,
  replicaMove,
  replicasOnMove,
  statusesAllowing,
  transition,
  type DeploymentEvent,
  type DeploymentStatus,
  type ReplicaEvent,
} from '../../src/deployments/deployment-states.ts';
import { engineModelUid } from '../../src/deployments/provisioning.ts';

const STATUSES: DeploymentStatus[] = ['requested', 'provisioning', 'starting', 'running', 'failed', 'terminating', 'terminated'];
const EVENTS: DeploymentEvent[] = ['placed', 'launched', 'ready', 'fail', 'delete', 'cleaned_up'];

describe('the deployment state machine', () => {
  it('takes a deployment from requested to running, one provisioning step at a time', () => {
    expect(transition('requested', 'placed')).toBe('provisioning');
    expect(transition('provisioning', 'launched')).toBe('starting');
    expect(transition('starting', 'ready')).toBe('running');
  });

  it('allows exactly these transitions, and no other', () => {
    const allowed = STATUSES.flatMap((from) => EVENTS.flatMap((event) => (allows(from, event) ? [`${from} -${event}-> ${transition(from, event)}`] : [])));
    expect(allowed).toEqual([
      'requested -placed-> provisioning',
      'requested -fail-> failed',
      'requested -delete-> terminating',
      'provisioning -launched-> starting',
      'provisioning -fail-> failed',
      'provisioning -delete-> terminating',
      'starting -ready-> running',
      'starting -fail-> failed',
      'starting -delete-> terminating',
      'running -fail-> failed',
      'running -delete-> terminating',
      'failed -delete-> terminating',
      'terminating -cleaned_up-> terminated',
      'terminated -delete-> terminated',
    ]);
  });

  it('fails only a deployment that may still hold GPUs or a model: not one failed, terminating or terminated', () => {
    expect(statusesAllowing('fail')).toEqual(['requested', 'provisioning', 'starting', 'running']);
  });

  it('refuses a second delete while the cleanup runs, and leaves a terminated deployment as it is', () => {
    expect(transition('terminating', 'delete')).toBeNull();
    expect(transition('terminated', 'delete')).toBe('terminated');
  });

  it('never brings a deployment back once it failed or is being deleted', () => {
    for (const from of ['failed', 'terminating', 'terminated'] as const) {
      for (const event of EVENTS) expect(['terminating', 'terminated', null]).toContain(transition(from, event));
    }
  });

  it('throws when asked for the next status of an event that is not allowed', () => {
    expect(nextStatus('requested', 'fail')).toBe('failed');
    expect(() => nextStatus('running', 'placed')).toThrow('a deployment in running cannot take the event placed');
  });

  it('tells the deployments that serve or may soon serve from those that never will again', () => {
    expect(STATUSES.filter(maySoonServe)).toEqual(['requested', 'provisioning', 'starting', 'running']);
  });

  it('calls final the statuses only the owner’s DELETE leaves: failed and terminated', () => {
    expect(STATUSES.filter(isFinal)).toEqual(['failed', 'terminated']);
  });

  it('counts against the limit every status but failed and terminated', () => {
    expect(STATUSES.filter((status) => !ACTIVE_STATUSES.includes(status))).toEqual(['failed', 'terminated']);
  });
});

describe('the replicas of a deployment', () => {
  const REPLICA_EVENTS: ReplicaEvent[] = ['ready', 'stop', 'fail', 'stopped'];

  it('allows exactly these moves of a replica, and brings none back once stopped', () => {
    const allowed = REPLICA_EVENTS.map((event) => `${replicaMove(event).from.join('|')} -${event}-> ${replicaMove(event).to}`);
    expect(allowed).toEqual([
      'starting -ready-> ready',
      'starting|ready|draining|failed -stop-> stopping',
      'starting|ready|draining -fail-> failed',
      'starting|ready|draining|stopping|failed -stopped-> stopped',
    ]);
  });

  it('moves the replicas with their deployment: ready as it runs, stopping on delete, failed with it, stopped as it is terminated', () => {
    const moves = Object.fromEntries(STATUSES.map((status) => [status, replicasOnMove(status)?.to ?? null]));
    expect(moves).toEqual({
      requested: null,
      provisioning: null,
      starting: null,
      running: 'ready',
      failed: 'failed',
      terminating: 'stopping',
      terminated: 'stopped',
    });
  });

  it('names replica 0 as the deployment’s model always was, and replica k by its ordinal', () => {
    const id = '0192f1c6-2b9e-7c4e-9b1a-5d0c8e6f7a21';
    expect(engineModelUid(id)).toBe('dep-0192f1c62b9e7c4e9b1a5d0c8e6f7a21');
    expect(engineModelUid(id, 0)).toBe('dep-0192f1c62b9e7c4e9b1a5d0c8e6f7a21');
    expect(engineModelUid(id, 2)).toBe('dep-0192f1c62b9e7c4e9b1a5d0c8e6f7a21-r2');
  });
});
