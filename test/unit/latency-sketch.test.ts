import { describe, expect, it } from 'vitest';
import { bucketOf, LatencySketch, SKETCH_BUCKETS, SKETCH_MIN_MS, SKETCH_RELATIVE_ACCURACY, valueOf } from '../../src/metrics/latency-sketch.ts';

/** The exact q-quantile as the sketch defines its rank: the value of rank ⌊q·(n−1)⌋ in sorted order. */
function exact(values: readonly number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(q * (sorted.length - 1))] as number;
}

/** A deterministic spread of latencies over five orders of magnitude (a linear congruential generator). */
function latencies(count: number, seed: number): number[] {
  let state = seed;
  const values: number[] = [];
  for (let i = 0; i < count; i++) {
    state = (state * 1_103_515_245 + 12_345) % 2 ** 31;
    values.push(0.5 * 10 ** ((state / 2 ** 31) * 5));
  }
  return values;
}

const within = (estimate: number | null, truth: number) => Math.abs((estimate as number) - truth) <= SKETCH_RELATIVE_ACCURACY * truth + 1e-9;

describe('latency sketch', () => {
  it('answers every percentile within 1 % of the exact one', () => {
    const values = latencies(20_000, 7);
    const sketch = new LatencySketch();
    for (const value of values) sketch.add(value);
    for (const q of [0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1]) expect(within(sketch.quantile(q), exact(values, q)), `q=${q}`).toBe(true);
  });

  it('merges sketches into the sketch of all their values, through their stored form', () => {
    const a = latencies(5_000, 1);
    const b = latencies(3_000, 2);
    const left = new LatencySketch();
    const right = new LatencySketch();
    for (const value of a) left.add(value);
    for (const value of b) right.add(value);
    const merged = new LatencySketch();
    merged.merge(JSON.parse(JSON.stringify(left.toJSON())));
    merged.merge(JSON.parse(JSON.stringify(right.toJSON())));
    const all = [...a, ...b];
    expect(merged.count).toBe(all.length);
    for (const q of [0.5, 0.95, 0.99]) expect(within(merged.quantile(q), exact(all, q)), `q=${q}`).toBe(true);
  });

  it('is empty (null percentiles, no stored form) until a value comes', () => {
    const sketch = new LatencySketch();
    expect(sketch.quantile(0.5)).toBeNull();
    expect(sketch.toJSON()).toBeNull();
    sketch.merge(null);
    expect(sketch.count).toBe(0);
  });

  it('stores only the buckets it used', () => {
    const sketch = new LatencySketch();
    for (let i = 0; i < 100; i++) sketch.add(250);
    expect(sketch.toJSON()).toEqual({ [bucketOf(250)]: 100 });
  });

  it('clamps values outside its range to its first and last buckets', () => {
    expect(bucketOf(0)).toBe(0);
    expect(bucketOf(-3)).toBe(0);
    expect(bucketOf(SKETCH_MIN_MS)).toBe(0);
    expect(bucketOf(1e12)).toBe(SKETCH_BUCKETS - 1);
    // The last bucket still holds durations of many hours at 1 %.
    expect(valueOf(SKETCH_BUCKETS - 2)).toBeGreaterThan(20 * 3_600_000);
  });

  it('ignores stored buckets it does not have (a corrupt or foreign row)', () => {
    const sketch = new LatencySketch();
    sketch.merge({ '-1': 3, [SKETCH_BUCKETS]: 2, x: 1, 10: 0, 20: 4 });
    expect(sketch.count).toBe(4);
  });
});
