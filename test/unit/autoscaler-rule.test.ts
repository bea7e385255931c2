import { describe, expect, it } from 'vitest';
import { decideReplicas, requestToRemember } from '../../src/deployments/scaling.ts';
import type { ScalingState } from '../../src/deployments/scaling.repository.ts';

const now = new Date('2026-11-29T10:00:00Z');
const secondsAgo = (seconds: number) => new Date(now.getTime() - seconds * 1000);
const COOLDOWN = 60;

/** A running deployment of 1 to 4 replicas at 4 requests each, serving 1, with no load. */
function state(overrides: Partial<ScalingState> = {}): ScalingState {
  return {
    id: 'd',
    min_replicas: 1,
    max_replicas: 4,
    target_concurrency: 4,
    scale_to_zero_after_seconds: 300,
    desired_replicas: 1,
    load: 0,
    idle_seconds: 0,
    reported_request_at: null,
    remembered_request_at: null,
    fewer_wanted_since: null,
    ready: 1,
    starting: 0,
    leaving: 0,
    ...overrides,
  };
}

describe('the autoscaler’s rule', () => {
  it('scales up at once to ⌈load / target⌉, within max_replicas', () => {
    expect(decideReplicas(state({ load: 9 }), now, COOLDOWN)).toEqual({ desired: 3, reason: 'load', fewerWantedSince: null });
    expect(decideReplicas(state({ load: 40 }), now, COOLDOWN)).toMatchObject({ desired: 4, reason: 'load' });
  });

  it('keeps the count while the load fits it, and forgets a cool-down the load came back from', () => {
    expect(decideReplicas(state({ desired_replicas: 2, load: 5 }), now, COOLDOWN)).toEqual({ desired: 2 });
    expect(decideReplicas(state({ desired_replicas: 2, load: 8, fewer_wanted_since: secondsAgo(30) }), now, COOLDOWN)).toEqual({ desired: 2, fewerWantedSince: null });
  });

  it('scales down only once the load has wanted fewer replicas for the whole cool-down (no flapping)', () => {
    const low = state({ desired_replicas: 3, load: 2 });
    expect(decideReplicas(low, now, COOLDOWN)).toEqual({ desired: 3, fewerWantedSince: now });
    expect(decideReplicas({ ...low, fewer_wanted_since: secondsAgo(59) }, now, COOLDOWN)).toEqual({ desired: 3 });
    expect(decideReplicas({ ...low, fewer_wanted_since: secondsAgo(60) }, now, COOLDOWN)).toEqual({ desired: 1, reason: 'load', fewerWantedSince: null });
  });

  it('never goes below min_replicas', () => {
    expect(decideReplicas(state({ min_replicas: 2, desired_replicas: 2, fewer_wanted_since: secondsAgo(600), idle_seconds: 9999 }), now, COOLDOWN)).toEqual({ desired: 2, fewerWantedSince: null });
  });

  it('with min_replicas 0, keeps one replica until no request came for scale_to_zero_after_seconds, then goes to zero at once', () => {
    const elastic = state({ min_replicas: 0, scale_to_zero_after_seconds: 300 });
    expect(decideReplicas({ ...elastic, idle_seconds: 299 }, now, COOLDOWN)).toEqual({ desired: 1 });
    expect(decideReplicas({ ...elastic, idle_seconds: 300 }, now, COOLDOWN)).toEqual({ desired: 0, reason: 'idle', fewerWantedSince: null });
    expect(decideReplicas({ ...elastic, idle_seconds: 300, load: 1 }, now, COOLDOWN)).toEqual({ desired: 1 });
  });

  it('does not send a deployment back to zero while its cold start is under way', () => {
    expect(decideReplicas(state({ min_replicas: 0, ready: 0, starting: 1, idle_seconds: 9999 }), now, COOLDOWN)).toEqual({ desired: 1 });
  });

  it('wakes a deployment at zero that has requests held', () => {
    expect(decideReplicas(state({ min_replicas: 0, desired_replicas: 0, ready: 0, load: 1 }), now, COOLDOWN)).toEqual({ desired: 1, reason: 'request', fewerWantedSince: null });
    expect(decideReplicas(state({ min_replicas: 0, desired_replicas: 0, ready: 0, load: 0, idle_seconds: 9999 }), now, COOLDOWN)).toEqual({ desired: 0 });
  });

  it('remembers the last request at once for a deployment that may go to zero, at most every 30 s for the others', () => {
    const at = (seconds: number) => secondsAgo(-seconds);
    expect(requestToRemember({ min_replicas: 0, reported_request_at: at(1), remembered_request_at: at(0) })).toEqual(at(1));
    expect(requestToRemember({ min_replicas: 1, reported_request_at: at(1), remembered_request_at: null })).toEqual(at(1));
    expect(requestToRemember({ min_replicas: 1, reported_request_at: at(29), remembered_request_at: at(0) })).toBeUndefined();
    expect(requestToRemember({ min_replicas: 1, reported_request_at: at(30), remembered_request_at: at(0) })).toEqual(at(30));
    expect(requestToRemember({ min_replicas: 0, reported_request_at: at(0), remembered_request_at: at(0) })).toBeUndefined();
    expect(requestToRemember({ min_replicas: 0, reported_request_at: null, remembered_request_at: at(0) })).toBeUndefined();
  });
});
