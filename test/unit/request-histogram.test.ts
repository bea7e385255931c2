import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { RequestHistogram } from '../../src/metrics/request-histogram.ts';

const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 1];
const OBSERVED: Array<[Record<'route' | 'status', string>, number]> = [
  [{ route: '/v1/chat/completions', status: '200' }, 0.004],
  [{ route: '/v1/chat/completions', status: '200' }, 0.005],
  [{ route: '/v1/chat/completions', status: '200' }, 0.0051],
  [{ route: '/v1/embeddings', status: '503' }, 0.3],
  [{ route: '/v1/chat/completions', status: '200' }, 7],
  [{ route: '/v1/embeddings', status: '503' }, 0.01],
];

describe('RequestHistogram', () => {
  it('exports what prom-client’s Histogram exports for the same observations, in both of the registry’s formats', async () => {
    const theirs = new Registry();
    const ours = new Registry();
    const reference = new Histogram({ name: 'latency_seconds', help: 'Latency.', labelNames: ['route', 'status'], buckets: BUCKETS, registers: [theirs] });
    const histogram = new RequestHistogram({ name: 'latency_seconds', help: 'Latency.', labelNames: ['route', 'status'], buckets: BUCKETS, registers: [ours] });
    const series = new Map<string, ReturnType<typeof histogram.series>>();
    for (const [labels, value] of OBSERVED) {
      reference.observe(labels, value);
      const key = JSON.stringify(labels);
      if (!series.has(key)) series.set(key, histogram.series(labels));
      series.get(key)?.observe(value);
    }
    expect(await ours.metrics()).toBe(await theirs.metrics());
    // prom-client's JSON has an `exemplar` (null) on each bucket: OpenMetrics only, none here.
    const withoutExemplars = (metrics: Array<{ values: Array<Record<string, unknown>> }>) => metrics.map((m) => ({ ...m, values: m.values.map(({ exemplar: _none, ...value }) => value) }));
    expect(await ours.getMetricsAsJSON()).toEqual(withoutExemplars((await theirs.getMetricsAsJSON()) as never));

    theirs.resetMetrics();
    ours.resetMetrics();
    const after = await ours.metrics();
    expect(after).toContain('latency_seconds_count{route="/v1/chat/completions",status="200"} 0');
    expect(after).not.toMatch(/ [1-9]/);
  });
});
