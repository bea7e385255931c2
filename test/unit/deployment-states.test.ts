import { describe, expect, it } from 'vitest';
import {
  ACTIVE_STATUSES,
  allows,
  isFinal,
  maySoonServe,
  nextStatus,
  statusesAllowing,
  transition,
  type DeploymentEvent,
  type DeploymentStatus,
} from '../../src/deployments/deployment-states.ts';

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
