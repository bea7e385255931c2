/**
 * A mergeable sketch of durations (milliseconds) for percentiles, after DDSketch (Masson, Rim and
 * Lee, VLDB 2019): log-spaced buckets whose bounds grow by γ = (1 + α) / (1 − α), so any value
 * read back from its bucket is within the relative accuracy α (1 %) of the true one. Two sketches
 * merge by adding their counts bucket by bucket (per process, per minute, then per step of a
 * chart), exactly, which averaging percentiles could not.
 *
 * The buckets are fixed: SKETCH_BUCKETS of them from SKETCH_MIN_MS (0.1 ms) up (about 21 hours);
 * a value below the first bound counts in bucket 0, one above the last in the last. Stored as a
 * JSON object of its non-empty buckets, `{"<index>": count}`, which Postgres merges with
 * `metrics_sketch_merge` (migration 20261203000200). Changing α or the range changes what every
 * stored index means: that takes a new column, not an edit here.
 */
export const SKETCH_RELATIVE_ACCURACY = 0.01;
export const SKETCH_MIN_MS = 0.1;
export const SKETCH_BUCKETS = 1024;

const GAMMA = (1 + SKETCH_RELATIVE_ACCURACY) / (1 - SKETCH_RELATIVE_ACCURACY);
const INVERSE_LOG_GAMMA = 1 / Math.log(GAMMA);

/** The stored form: the non-empty buckets' counts by index. */
export type SketchCounts = Record<string, number>;

/** Bucket of a value: ⌈log_γ(value / min)⌉, clamped to the fixed range. A few arithmetic operations. */
export function bucketOf(ms: number): number {
  if (!(ms > SKETCH_MIN_MS)) return 0;
  const index = Math.ceil(Math.log(ms / SKETCH_MIN_MS) * INVERSE_LOG_GAMMA);
  return index < SKETCH_BUCKETS ? index : SKETCH_BUCKETS - 1;
}

/**
 * The value a bucket stands for: the point of (γ^(i−1), γ^i] · min within α of both bounds
 * (2γ^i / (γ + 1) · min), DDSketch's estimate.
 */
export function valueOf(index: number): number {
  if (index <= 0) return SKETCH_MIN_MS;
  return ((2 * GAMMA ** index) / (GAMMA + 1)) * SKETCH_MIN_MS;
}

export class LatencySketch {
  /** Counts by bucket; allocated on the first value (many minutes of a deployment see no stream). */
  #counts: Uint32Array | undefined;
  #count = 0;

  /** Counts one duration: a logarithm, a multiplication and an increment. */
  add(ms: number): void {
    this.#counts ??= new Uint32Array(SKETCH_BUCKETS);
    const index = bucketOf(ms);
    this.#counts[index] = (this.#counts[index] as number) + 1;
    this.#count += 1;
  }

  get count(): number {
    return this.#count;
  }

  /** Adds another sketch's counts (stored form) to this one's. */
  merge(counts: SketchCounts | null | undefined): void {
    if (!counts) return;
    for (const [key, value] of Object.entries(counts)) {
      const index = Number(key);
      if (!Number.isInteger(index) || index < 0 || index >= SKETCH_BUCKETS || !(value > 0)) continue;
      this.#counts ??= new Uint32Array(SKETCH_BUCKETS);
      this.#counts[index] = (this.#counts[index] as number) + value;
      this.#count += value;
    }
  }

  /**
   * The q-quantile (0 ≤ q ≤ 1) within the relative accuracy of a value of rank ⌊q·(n−1)⌋ (the
   * lower of the middle two for an even count at q = 0.5), null when the sketch is empty.
   */
  quantile(q: number): number | null {
    const counts = this.#counts;
    if (!counts || this.#count === 0) return null;
    const rank = Math.floor(q * (this.#count - 1));
    let seen = 0;
    for (let index = 0; index < counts.length; index++) {
      seen += counts[index] as number;
      if (seen > rank) return valueOf(index);
    }
    return valueOf(counts.length - 1);
  }

  /** The stored form: non-empty buckets only (a minute of one latency is one entry). */
  toJSON(): SketchCounts | null {
    const counts = this.#counts;
    if (!counts || this.#count === 0) return null;
    const out: SketchCounts = {};
    for (let index = 0; index < counts.length; index++) {
      if (counts[index]) out[index] = counts[index] as number;
    }
    return out;
  }
}
