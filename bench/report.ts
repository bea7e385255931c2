import type { LoadResult, StreamResult } from './load.ts';
import type { MachineUsage, ProcessUsage } from './procfs.ts';

/** The figures of one run, the §4 budgets they are held to, and their text and Markdown forms. */

export interface PhaseFigures {
  load: LoadResult;
  /** CPU and peak RSS of the service process over the measured window (proxy phases only). */
  proxy?: ProcessUsage;
  /** CPU of the simulator process over the measured window. */
  engine: ProcessUsage;
  /** The whole machine and the load generator over the window. */
  machine: MachineUsage;
}

export interface StreamFigures {
  result: StreamResult;
  proxy?: ProcessUsage;
  engine: ProcessUsage;
  machine: MachineUsage;
}

export interface RunFigures {
  direct: { c1: PhaseFigures; c64: PhaseFigures; stream: StreamFigures };
  /** Undefined when the proxy could not be measured (see `proxyStatus`). */
  proxy: { c1: PhaseFigures; c64: PhaseFigures; stream: StreamFigures } | undefined;
  /** "measured", or why the proxy columns are empty ("proxy not built yet", an error). */
  proxyStatus: string;
}

export interface Derived {
  c1AddedP50: number;
  c1AddedP99: number;
  c64Ratio: number;
  c64AddedP50: number;
  c64AddedP99: number;
  /** Proxy CPU per answered request at 64 connections (the budget's figure) and at 1. */
  cpuMsPerRequest: number;
  cpuMsPerRequestC1: number;
  /** Highest RSS of the service process during any proxy phase. */
  peakRssMb: number;
  streamAddedTtfbP50: number;
}

export interface Budget {
  name: string;
  limit: string;
  value: number | undefined;
  unit: string;
  met: boolean | undefined;
}

export function derive(figures: RunFigures): Derived | undefined {
  const { direct, proxy } = figures;
  if (!proxy) return undefined;
  const perRequest = (phase: PhaseFigures) => (phase.proxy ? phase.proxy.cpuMs / Math.max(1, phase.load.ok + phase.load.non2xx) : NaN);
  return {
    c1AddedP50: proxy.c1.load.p50 - direct.c1.load.p50,
    c1AddedP99: proxy.c1.load.p99 - direct.c1.load.p99,
    c64Ratio: proxy.c64.load.requestsPerSecond / direct.c64.load.requestsPerSecond,
    c64AddedP50: proxy.c64.load.p50 - direct.c64.load.p50,
    c64AddedP99: proxy.c64.load.p99 - direct.c64.load.p99,
    cpuMsPerRequest: perRequest(proxy.c64),
    cpuMsPerRequestC1: perRequest(proxy.c1),
    peakRssMb: Math.max(...[proxy.c1.proxy, proxy.c64.proxy, proxy.stream.proxy].map((usage) => usage?.peakRssMb ?? NaN)),
    streamAddedTtfbP50: proxy.stream.result.ttfbP50 - direct.stream.result.ttfbP50,
  };
}

export function budgets(derived: Derived | undefined): Budget[] {
  const check = (name: string, limit: string, value: number | undefined, unit: string, ok: (v: number) => boolean): Budget => ({
    name,
    limit,
    value,
    unit,
    met: value === undefined || Number.isNaN(value) ? undefined : ok(value),
  });
  const d = derived;
  return [
    check('c=1 added p50', '<= 1.0 ms', d?.c1AddedP50, 'ms', (v) => v <= 1.0),
    check('c=1 added p99', '<= 2.5 ms', d?.c1AddedP99, 'ms', (v) => v <= 2.5),
    check('c=64 throughput vs direct', '>= 0.90x', d?.c64Ratio, 'x', (v) => v >= 0.9),
    check('c=64 added p50', '<= 1.5 ms', d?.c64AddedP50, 'ms', (v) => v <= 1.5),
    check('c=64 added p99', '<= 10 ms', d?.c64AddedP99, 'ms', (v) => v <= 10),
    check('proxy CPU per request (c=64)', '<= 0.35 ms', d?.cpuMsPerRequest, 'ms', (v) => v <= 0.35),
    check('proxy peak RSS under load', '<= 250 MB', d?.peakRssMb, 'MB', (v) => v <= 250),
    check('streaming added TTFB p50 (32 streams)', '<= 1.5 ms', d?.streamAddedTtfbP50, 'ms', (v) => v <= 1.5),
  ];
}

const num = (value: number | undefined, digits = 2) => (value === undefined || Number.isNaN(value) ? '–' : value.toFixed(digits));
const signed = (value: number | undefined, digits = 2) =>
  value === undefined || Number.isNaN(value) ? '–' : `${value >= 0 ? '+' : ''}${value.toFixed(digits)}`;
const verdict = (met: boolean | undefined) => (met === undefined ? 'n/a' : met ? 'met' : 'MISSED');

/** Rows of the one table: [label, direct, proxy, difference]. */
export function rows(figures: RunFigures, derived: Derived | undefined): string[][] {
  const { direct, proxy } = figures;
  // The cell says why the proxy is missing in a few words; the whole reason goes to the notes.
  const missing = proxy ? undefined : figures.proxyStatus.startsWith('proxy failed') ? 'proxy failed' : figures.proxyStatus;
  const p = <T>(pick: (x: NonNullable<RunFigures['proxy']>) => T) => (proxy ? pick(proxy) : undefined);
  const cell = (value: number | undefined, digits = 2) => missing ?? num(value, digits);
  const d = derived;
  const out: string[][] = [['', 'direct', 'proxy', 'proxy − direct']];
  for (const [label, key] of [['c=1', 'c1'], ['c=64', 'c64']] as const) {
    const dl = direct[key].load;
    const pl = p((x) => x[key].load);
    out.push([`${label} req/s`, num(dl.requestsPerSecond, 1), cell(pl?.requestsPerSecond, 1), pl ? `ratio ${num(pl.requestsPerSecond / dl.requestsPerSecond, 3)}x` : '–']);
    out.push([`${label} p50 ms`, num(dl.p50), cell(pl?.p50), d ? signed(key === 'c1' ? d.c1AddedP50 : d.c64AddedP50) : '–']);
    out.push([`${label} p99 ms`, num(dl.p99), cell(pl?.p99), d ? signed(key === 'c1' ? d.c1AddedP99 : d.c64AddedP99) : '–']);
    const errors = (r: LoadResult) => r.non2xx + r.errors + r.timeouts;
    if (errors(dl) || (pl && errors(pl))) out.push([`${label} non-2xx/errors`, String(errors(dl)), pl ? String(errors(pl)) : '–', '']);
  }
  const engineCpu = (phase: PhaseFigures) => phase.engine.cpuMs / Math.max(1, phase.load.ok);
  const busy = (phase: PhaseFigures) => `${(phase.machine.busy * 100).toFixed(0)}%`;
  out.push(['c=64 machine CPU busy', busy(direct.c64), proxy ? busy(proxy.c64) : '–', '']);
  const dbCpu = (phase: PhaseFigures) => num(phase.machine.databaseMs / Math.max(1, phase.load.ok), 3);
  out.push(['Postgres CPU ms/request (c=64)', dbCpu(direct.c64), proxy ? dbCpu(proxy.c64) : '–', '']);
  out.push(['engine CPU ms/request (c=64)', num(engineCpu(direct.c64), 3), proxy ? num(engineCpu(proxy.c64), 3) : '–', '']);
  out.push(['proxy CPU ms/request c=1 / c=64', '', missing ?? `${num(d?.cpuMsPerRequestC1, 3)} / ${num(d?.cpuMsPerRequest, 3)}`, '']);
  out.push(['proxy peak RSS MB', '', missing ?? num(d?.peakRssMb, 1), '']);
  const ds = direct.stream.result;
  const ps = p((x) => x.stream.result);
  out.push(['stream (32) TTFB p50 ms', num(ds.ttfbP50), cell(ps?.ttfbP50), d ? signed(d.streamAddedTtfbP50) : '–']);
  out.push(['stream (32) TTFB p99 ms', num(ds.ttfbP99), cell(ps?.ttfbP99), ps ? signed(ps.ttfbP99 - ds.ttfbP99) : '–']);
  out.push(['stream (32) total p50 ms', num(ds.totalP50, 1), cell(ps?.totalP50, 1), ps ? signed(ps.totalP50 - ds.totalP50) : '–']);
  out.push(['stream (32) streams, chunks p50', `${ds.streams}, ${num(ds.chunksP50, 0)}`, ps ? `${ps.streams}, ${num(ps.chunksP50, 0)}` : (missing ?? '–'), '']);
  if (ds.failed || (ps && ps.failed)) out.push(['stream (32) failed', String(ds.failed), ps ? String(ps.failed) : '–', '']);
  return out;
}

export function textTable(table: string[][]): string {
  const widths = (table[0] ?? []).map((_, i) => Math.max(...table.map((row) => (row[i] ?? '').length)));
  return table.map((row) => row.map((value, i) => (i === 0 ? value.padEnd(widths[i] ?? 0) : value.padStart(widths[i] ?? 0))).join('   ').trimEnd()).join('\n');
}

export function textBudgets(list: Budget[]): string {
  const width = Math.max(...list.map((b) => b.name.length));
  return list
    .map((b) => `  [${verdict(b.met).padEnd(6)}] ${b.name.padEnd(width)}  ${b.limit.padEnd(10)} measured ${b.unit === 'x' ? `${num(b.value, 3)}x` : `${num(b.value)} ${b.unit}`}`)
    .join('\n');
}

export function markdown(meta: Record<string, unknown>, table: string[][], list: Budget[], notes: string[]): string {
  const line = (row: string[]) => `| ${row.join(' | ')} |`;
  const lines = [
    '# Proxy overhead benchmark: latest run',
    '',
    `Run ${String(meta.started_at)}, ${String(meta.machine)}; written by \`make bench\` (bench/proxy-overhead.ts).`,
    '',
    line(table[0] ?? []),
    line((table[0] ?? []).map((_, i) => (i === 0 ? '---' : '---:'))),
    ...table.slice(1).map(line),
    '',
    '| Budget (DESIGN.md §4) | Limit | Measured | |',
    '|---|---|---:|---|',
    ...list.map((b) => line([b.name, b.limit, b.unit === 'x' ? `${num(b.value, 3)}x` : `${num(b.value)} ${b.unit}`, verdict(b.met)])),
    '',
    ...notes.map((note) => `- ${note}`),
    '',
  ];
  return lines.join('\n');
}
