import { describe, expect, it } from 'vitest';
import { AppError } from '../../src/errors.ts';
import { metricsRange, type MetricsQuery } from '../../src/metrics/metrics-window.ts';

const now = new Date('2026-12-03T09:17:25Z');

function refusal(query: MetricsQuery): { location?: string | undefined } {
  try {
    metricsRange(query, now);
  } catch (error) {
    expect(error).toBeInstanceOf(AppError);
    expect((error as AppError).code).toBe('VALIDATION_FAILED');
    return { location: (error as AppError).errors?.[0]?.location };
  }
  throw new Error('the query was accepted');
}

describe('metrics window and step rules', () => {
  it('reads the last hour by minute by default, widened to whole minutes', () => {
    const range = metricsRange({}, now);
    expect(range.step).toBe('1m');
    expect(range.start.toISOString()).toBe('2026-12-03T08:17:00.000Z');
    expect(range.end.toISOString()).toBe('2026-12-03T09:18:00.000Z');
  });

  it('defaults each named window to the smallest step it allows', () => {
    expect(metricsRange({ window: '24h' }, now).step).toBe('5m');
    expect(metricsRange({ window: '7d' }, now).step).toBe('1h');
  });

  it('allows a coarser step than the default', () => {
    const range = metricsRange({ window: '1h', step: '5m' }, now);
    expect(range.start.toISOString()).toBe('2026-12-03T08:15:00.000Z');
    expect(range.end.toISOString()).toBe('2026-12-03T09:20:00.000Z');
  });

  it('refuses a step finer than the range allows with 422 at query/step', () => {
    expect(refusal({ window: '24h', step: '1m' }).location).toBe('query/step');
    expect(refusal({ window: '7d', step: '5m' }).location).toBe('query/step');
  });

  it('takes a custom range of start and end, up to 30 days', () => {
    const range = metricsRange({ start: '2026-12-01T00:00:00Z', end: '2026-12-01T06:00:00Z' }, now);
    expect(range).toMatchObject({ step: '1m', stepMs: 60_000 });
    expect(range.start.toISOString()).toBe('2026-12-01T00:00:00.000Z');
    expect(range.end.toISOString()).toBe('2026-12-01T06:00:00.000Z');
    expect(metricsRange({ start: '2026-11-03T00:00:00Z', end: '2026-12-03T00:00:00Z' }, now).step).toBe('1h');
  });

  it('refuses a custom range that is half given, reversed, too long, or given with a window', () => {
    expect(refusal({ start: '2026-12-01T00:00:00Z' }).location).toBe('query/end');
    expect(refusal({ end: '2026-12-01T00:00:00Z' }).location).toBe('query/start');
    expect(refusal({ start: '2026-12-02T00:00:00Z', end: '2026-12-01T00:00:00Z' }).location).toBe('query/end');
    expect(refusal({ start: '2026-10-01T00:00:00Z', end: '2026-12-01T00:00:00Z' }).location).toBe('query/start');
    expect(refusal({ window: '1h', start: '2026-12-01T00:00:00Z', end: '2026-12-01T01:00:00Z' }).location).toBe('query/window');
  });
});
