import type { Knex } from 'knex';
import { LatencySketch, type SketchCounts } from './latency-sketch.ts';
import { metricsRange, type MetricsQuery, type MetricsRange } from './metrics-window.ts';
import { readDeploymentSteps, readGpuSecondsSteps, readKeySteps, type StepRow } from './request-metrics.repository.ts';

/** One point of a chart: [Unix seconds of the step's start, value]; null for a percentile of a step without requests. */
export type Point = [number, number | null];

const COUNT_SERIES = ['requests_2xx', 'requests_4xx', 'requests_5xx', 'requests_429', 'tokens_in', 'tokens_out', 'held_requests'] as const;
const PERCENTILES = [
  ['p50', 0.5],
  ['p95', 0.95],
  ['p99', 0.99],
] as const;

type CountSeries = (typeof COUNT_SERIES)[number];
type PercentileSeries = `${'latency' | 'ttft'}_${(typeof PERCENTILES)[number][0]}_ms`;

export type RequestSeries = Record<CountSeries | PercentileSeries, Point[]>;
export type DeploymentSeries = RequestSeries & Record<'gpu_seconds' | 'replicas_desired' | 'replicas_ready', Point[]>;

/** The range's answer head: start and end (ISO 8601), and the step. */
interface RangeHead {
  start: string;
  end: string;
  step: MetricsRange['step'];
}

function headOf(range: MetricsRange): RangeHead {
  return { start: range.start.toISOString(), end: range.end.toISOString(), step: range.step };
}

/** Every step's start in the range, Unix seconds: each series has one point per step, empty steps included. */
function stepsOf(range: MetricsRange): number[] {
  const steps: number[] = [];
  for (let at = range.start.getTime(); at < range.end.getTime(); at += range.stepMs) steps.push(at / 1000);
  return steps;
}

function merged(sketches: SketchCounts[] | null): LatencySketch {
  const sketch = new LatencySketch();
  for (const counts of sketches ?? []) sketch.merge(counts);
  return sketch;
}

/** Rounds a percentile to a hundredth of a millisecond (the sketch is within 1 % anyway). */
const ms = (value: number | null) => (value === null ? null : Math.round(value * 100) / 100);

/** The request series of the range from its steps' rows: counts 0 and percentiles null where a step has no row. */
function requestSeries(steps: readonly number[], rows: readonly StepRow[]): RequestSeries {
  const byStep = new Map(rows.map((row) => [row.t, row]));
  const series = Object.fromEntries([...COUNT_SERIES, ...PERCENTILES.flatMap(([p]) => [`latency_${p}_ms`, `ttft_${p}_ms`])].map((name) => [name, [] as Point[]])) as RequestSeries;
  for (const t of steps) {
    const row = byStep.get(t);
    for (const name of COUNT_SERIES) series[name].push([t, row ? Number(row[name]) : 0]);
    const latency = merged(row?.latency_sketches ?? null);
    const ttft = merged(row?.ttft_sketches ?? null);
    for (const [p, q] of PERCENTILES) {
      series[`latency_${p}_ms`].push([t, ms(latency.quantile(q))]);
      series[`ttft_${p}_ms`].push([t, ms(ttft.quantile(q))]);
    }
  }
  return series;
}

/**
 * A deployment's series over the range the query asks for (metrics-window.ts): requests, latency,
 * tokens and holds from its minute rollups, GPU seconds from its metered intervals, replicas (the
 * highest sampled in each step; null where none was) from the autoscaler's samples.
 */
export async function deploymentSeries(db: Knex, deploymentId: string, query: MetricsQuery, now = new Date()): Promise<RangeHead & { series: DeploymentSeries }> {
  const range = metricsRange(query, now);
  const steps = stepsOf(range);
  const [rows, gpu] = await Promise.all([readDeploymentSteps(db, deploymentId, range), readGpuSecondsSteps(db, deploymentId, range)]);
  const byStep = new Map(rows.map((row) => [row.t, row]));
  const gpuByStep = new Map(gpu.map((row) => [row.t, row.gpu_seconds]));
  const sampled = (t: number, name: 'replicas_desired' | 'replicas_ready'): Point => [t, byStep.get(t)?.[name] ?? null];
  return {
    ...headOf(range),
    series: {
      ...requestSeries(steps, rows),
      gpu_seconds: steps.map((t) => [t, Math.round((gpuByStep.get(t) ?? 0) * 1000) / 1000]),
      replicas_desired: steps.map((t) => sampled(t, 'replicas_desired')),
      replicas_ready: steps.map((t) => sampled(t, 'replicas_ready')),
    },
  };
}

/** An API key's request series over the range the query asks for. */
export async function keySeries(db: Knex, apiKeyId: number, query: MetricsQuery, now = new Date()): Promise<RangeHead & { series: RequestSeries }> {
  const range = metricsRange(query, now);
  return { ...headOf(range), series: requestSeries(stepsOf(range), await readKeySteps(db, apiKeyId, range)) };
}
