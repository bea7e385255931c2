import type { Registry } from 'prom-client';

/** One label set's counts: per bucket (not cumulative), their sum and count. */
export interface HistogramSeries {
  observe(value: number): void;
}

interface Series extends HistogramSeries {
  readonly labels: Readonly<Record<string, string>>;
  readonly counts: Float64Array;
  sum: number;
  count: number;
}

interface ExportedValue {
  labels: Record<string, string | number>;
  sharedLabels?: Record<string, string>;
  value: number;
  metricName: string;
}

/**
 * A Prometheus histogram for the request path. Each label set is bound once (`series`) to plain
 * counts, so an observation is a search of the buckets and three additions; prom-client's
 * `Histogram` checks and hashes the labels of every observation, a bound child's too (1 % of the
 * proxy's CPU at 64 connections for its three per request). It is a metric of the registries it is
 * given, exported as prom-client exports its own histograms (`_bucket` with `le`, `_sum`, `_count`).
 */
export class RequestHistogram<Label extends string> {
  readonly name: string;
  readonly help: string;
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly #buckets: readonly number[];
  readonly #series: Series[] = [];

  constructor(options: { name: string; help: string; labelNames: readonly Label[]; buckets: readonly number[]; registers: readonly Registry[] }) {
    this.name = options.name;
    this.help = options.help;
    this.#buckets = [...options.buckets].sort((a, b) => a - b);
    for (const registry of options.registers) registry.registerMetric(this as never);
  }

  /** The counts of one label set, made on the first call for it: keep it, and observe through it. */
  series(labels: Readonly<Record<Label, string>>): HistogramSeries {
    const buckets = this.#buckets;
    const series: Series = {
      labels: { ...labels },
      counts: new Float64Array(buckets.length),
      sum: 0,
      count: 0,
      observe(value: number) {
        let bucket = 0;
        while (bucket < buckets.length && value > (buckets[bucket] as number)) bucket++;
        if (bucket < buckets.length) series.counts[bucket] = (series.counts[bucket] as number) + 1;
        series.sum += value;
        series.count += 1;
      },
    };
    this.#series.push(series);
    return series;
  }

  /** The exposition's values (the registry's text format): the series' labels shared by their lines. */
  getForPromString(): { name: string; help: string; type: string; aggregator: string; values: ExportedValue[] } {
    const values: ExportedValue[] = [];
    for (const series of this.#series) {
      let cumulative = 0;
      this.#buckets.forEach((bound, i) => {
        cumulative += series.counts[i] as number;
        values.push({ labels: { le: bound }, sharedLabels: series.labels, value: cumulative, metricName: `${this.name}_bucket` });
      });
      values.push({ labels: { le: '+Inf' }, sharedLabels: series.labels, value: series.count, metricName: `${this.name}_bucket` });
      values.push({ labels: {}, sharedLabels: series.labels, value: series.sum, metricName: `${this.name}_sum` });
      values.push({ labels: {}, sharedLabels: series.labels, value: series.count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  /** As `getForPromString`, each value's labels whole (the registry's JSON). */
  get(): { name: string; help: string; type: string; aggregator: string; values: ExportedValue[] } {
    const exported = this.getForPromString();
    return { ...exported, values: exported.values.map(({ sharedLabels, ...value }) => ({ ...value, labels: { ...sharedLabels, ...value.labels } })) };
  }

  /** Back to no observation (the registry's `resetMetrics`). */
  reset(): void {
    for (const series of this.#series) {
      series.counts.fill(0);
      series.sum = 0;
      series.count = 0;
    }
  }
}
