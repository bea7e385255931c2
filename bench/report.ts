import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import path from 'node:path';
import type { LoadResult, StreamResult } from './load.ts';
import { ROOT } from './processes.ts';
import type { MachineUsage, ProcessUsage } from './procfs.ts';

/**
 * What a benchmark prints and writes: the figures of one proxy run (every target, every
 * repetition), their medians, the budgets of DESIGN.md §4 they are held to, and their text and
 * Markdown forms; for every bench, its lines on stdout, its report and its result files in
 * bench/results.
 */

export const RESULTS = path.join(ROOT, 'bench', 'results');

export const out = (text = '') => process.stdout.write(`${text}\n`);
export const step = (text: string) => out(`• ${text}`);

/** What stands in front of the engine: nothing (`direct`), a reference pass-through, or the service. */
export type TargetName = 'direct' | 'raw' | 'raw-undici' | 'express-got' | 'proxy';

export interface PhaseFigures {
  load: LoadResult;
  /** CPU and peak RSS of the process in front of the engine over the window (undefined for `direct`). */
  front?: ProcessUsage;
  /** CPU of the simulator process over the window. */
  engine: ProcessUsage;
  /** The whole machine, the load generator and the bench database's Postgres backends over the window. */
  machine: MachineUsage;
}

export interface StreamFigures {
  result: StreamResult;
  front?: ProcessUsage;
  engine: ProcessUsage;
  machine: MachineUsage;
}

/** One repetition: each target measured at each load, in rotated order. */
export interface Repetition {
  c1: Partial<Record<TargetName, PhaseFigures>>;
  c64: Partial<Record<TargetName, PhaseFigures>>;
  stream: Partial<Record<TargetName, StreamFigures>>;
}

export interface Idle {
  seconds: number;
  serviceCpuMsPerSecond: number;
  databaseCpuMsPerSecond: number;
  serviceRssMb: number;
}

export interface RunFigures {
  targets: TargetName[];
  repetitions: Repetition[];
  idle: Idle | undefined;
  /** From the API's answer creating a deployment to the status leaving `requested`, ms (polled every 20 ms). */
  pickupMs: number | undefined;
}

/** The medians over the repetitions for one target; "added" figures are against `direct` of the same repetition. */
export interface Summary {
  c1Rps: number;
  c1AddedP50: number;
  c1AddedP99: number;
  c64Ratio: number;
  c64AddedP50: number;
  c64AddedP99: number;
  /** CPU per answered request of the process in front of the engine (for `direct`: the engine's own). */
  cpuMsC1: number;
  cpuMsC64: number;
  /** Highest RSS of the process in front during any phase of any repetition. */
  peakRssMb: number;
  streamAddedTtfbP50: number;
  streamAddedTtfbP99: number;
  /** Postgres backends of the bench database, CPU per request at 64 connections. */
  databaseMsC64: number;
  /** Absolute figures of `direct`, for the table. */
  p50C1: number;
  p99C1: number;
  ttfbP50: number;
  ttfbP99: number;
  errors: number;
}

export interface Budget {
  name: string;
  limit: string;
  value: number | undefined;
  unit: string;
  met: boolean | undefined;
}

export function median(values: number[]): number {
  const sorted = values.filter((value) => !Number.isNaN(value)).sort((a, b) => a - b);
  if (!sorted.length) return NaN;
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? (sorted[middle] as number) : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2;
}

const answered = (phase: PhaseFigures) => Math.max(1, phase.load.ok + phase.load.non2xx);
const cpuPerRequest = (phase: PhaseFigures) => (phase.front ?? phase.engine).cpuMs / answered(phase);

export function summarize(figures: RunFigures, target: TargetName): Summary | undefined {
  const reps = figures.repetitions.filter((rep) => rep.c1[target] && rep.c64[target] && rep.stream[target] && rep.c1.direct && rep.c64.direct && rep.stream.direct);
  if (!reps.length) return undefined;
  const each = (pick: (rep: Repetition) => number) => median(reps.map(pick));
  const c1 = (rep: Repetition) => rep.c1[target] as PhaseFigures;
  const c64 = (rep: Repetition) => rep.c64[target] as PhaseFigures;
  const stream = (rep: Repetition) => rep.stream[target] as StreamFigures;
  const direct = { c1: (rep: Repetition) => rep.c1.direct as PhaseFigures, c64: (rep: Repetition) => rep.c64.direct as PhaseFigures, stream: (rep: Repetition) => rep.stream.direct as StreamFigures };
  const peaks = reps.flatMap((rep) => [c1(rep).front, c64(rep).front, stream(rep).front].map((usage) => usage?.peakRssMb ?? NaN));
  const errors = (load: LoadResult) => load.non2xx + load.errors + load.timeouts;
  return {
    c1Rps: each((rep) => c1(rep).load.requestsPerSecond),
    c1AddedP50: each((rep) => c1(rep).load.p50 - direct.c1(rep).load.p50),
    c1AddedP99: each((rep) => c1(rep).load.p99 - direct.c1(rep).load.p99),
    c64Ratio: each((rep) => c64(rep).load.requestsPerSecond / direct.c64(rep).load.requestsPerSecond),
    c64AddedP50: each((rep) => c64(rep).load.p50 - direct.c64(rep).load.p50),
    c64AddedP99: each((rep) => c64(rep).load.p99 - direct.c64(rep).load.p99),
    cpuMsC1: each((rep) => cpuPerRequest(c1(rep))),
    cpuMsC64: each((rep) => cpuPerRequest(c64(rep))),
    peakRssMb: peaks.some((peak) => !Number.isNaN(peak)) ? Math.max(...peaks.filter((peak) => !Number.isNaN(peak))) : NaN,
    streamAddedTtfbP50: each((rep) => stream(rep).result.ttfbP50 - direct.stream(rep).result.ttfbP50),
    streamAddedTtfbP99: each((rep) => stream(rep).result.ttfbP99 - direct.stream(rep).result.ttfbP99),
    databaseMsC64: each((rep) => c64(rep).machine.databaseMs / answered(c64(rep))),
    p50C1: each((rep) => c1(rep).load.p50),
    p99C1: each((rep) => c1(rep).load.p99),
    ttfbP50: each((rep) => stream(rep).result.ttfbP50),
    ttfbP99: each((rep) => stream(rep).result.ttfbP99),
    errors: reps.reduce((sum, rep) => sum + errors(c1(rep).load) + errors(c64(rep).load) + stream(rep).result.failed, 0),
  };
}

/** The budgets of DESIGN.md §4, each relative to a reference measured in the same run (undefined: not measured). */
export function budgets(figures: RunFigures): Budget[] {
  const proxy = summarize(figures, 'proxy');
  const raw = summarize(figures, 'raw');
  const expressGot = summarize(figures, 'express-got');
  const check = (name: string, limit: string, value: number | undefined, unit: string, bound: number | undefined, ok: (v: number, b: number) => boolean): Budget => {
    const known = (n: number | undefined): n is number => n !== undefined && !Number.isNaN(n);
    return { name, limit, value, unit, met: known(value) && known(bound) ? ok(value, bound) : undefined };
  };
  const fmt = (value: number | undefined, digits: number) => (value === undefined || Number.isNaN(value) ? '?' : value.toFixed(digits));
  const idle = figures.idle ? figures.idle.serviceCpuMsPerSecond + figures.idle.databaseCpuMsPerSecond : undefined;
  return [
    check('c=64 RPS/direct >= 0.85 x raw', `>= ${fmt(raw && raw.c64Ratio * 0.85, 3)}x`, proxy?.c64Ratio, 'x', raw && raw.c64Ratio * 0.85, (v, b) => v >= b),
    check('c=64 CPU per request <= 2 x raw', `<= ${fmt(raw && raw.cpuMsC64 * 2, 3)} ms`, proxy?.cpuMsC64, 'ms', raw && raw.cpuMsC64 * 2, (v, b) => v <= b),
    check('c=1 added p50 <= express-got', `<= ${fmt(expressGot?.c1AddedP50, 2)} ms`, proxy?.c1AddedP50, 'ms', expressGot?.c1AddedP50, (v, b) => v <= b),
    check('peak RSS <= express-got', `<= ${fmt(expressGot?.peakRssMb, 0)} MB`, proxy?.peakRssMb, 'MB', expressGot?.peakRssMb, (v, b) => v <= b),
    check('32 streams added TTFB p99 <= express-got', `<= ${fmt(expressGot?.streamAddedTtfbP99, 2)} ms`, proxy?.streamAddedTtfbP99, 'ms', expressGot?.streamAddedTtfbP99, (v, b) => v <= b),
    check('idle, ROLE=all: service + its Postgres', '<= 10 ms CPU/s', idle, 'ms/s', 10, (v, b) => v <= b),
    check('a requested deployment picked up', '< 1000 ms', figures.pickupMs, 'ms', 1000, (v, b) => v < b),
  ];
}

const num = (value: number | undefined, digits = 2) => (value === undefined || Number.isNaN(value) ? '–' : value.toFixed(digits));
const signed = (value: number | undefined, digits = 2) => (value === undefined || Number.isNaN(value) ? '–' : `${value >= 0 ? '+' : ''}${value.toFixed(digits)}`);
export const verdict = (met: boolean | undefined) => (met === undefined ? 'n/a' : met ? 'met' : 'MISSED');

/** Rows of the one table: [label, then one column per target]. */
export function rows(figures: RunFigures): string[][] {
  const targets = figures.targets;
  const s = Object.fromEntries(targets.map((target) => [target, summarize(figures, target)])) as Record<TargetName, Summary | undefined>;
  const row = (label: string, cell: (summary: Summary, target: TargetName) => string) => [label, ...targets.map((target) => (s[target] ? cell(s[target], target) : 'not measured'))];
  const added = (value: number, absolute: number, target: TargetName, digits = 2) => (target === 'direct' ? num(absolute, digits) : signed(value, digits));
  const out = [
    ['', ...targets],
    row('c=1 req/s', (x) => num(x.c1Rps, 1)),
    row('c=1 p50 / p99 ms (others: added)', (x, t) => `${added(x.c1AddedP50, x.p50C1, t)} / ${added(x.c1AddedP99, x.p99C1, t)}`),
    row('c=64 RPS/direct', (x) => `${num(x.c64Ratio, 3)}x`),
    row('c=64 added p50 / p99 ms', (x, t) => (t === 'direct' ? '' : `${signed(x.c64AddedP50)} / ${signed(x.c64AddedP99)}`)),
    row('CPU ms/request c=1 / c=64 (direct: engine)', (x) => `${num(x.cpuMsC1, 3)} / ${num(x.cpuMsC64, 3)}`),
    row('peak RSS MB', (x, t) => (t === 'direct' ? '' : num(x.peakRssMb, 0))),
    row('32 streams TTFB p50 / p99 ms (others: added)', (x, t) => `${added(x.streamAddedTtfbP50, x.ttfbP50, t)} / ${added(x.streamAddedTtfbP99, x.ttfbP99, t)}`),
  ];
  if (s.proxy) out.push(row('Postgres CPU ms/request c=64', (x, t) => (t === 'proxy' ? num(x.databaseMsC64, 3) : '')));
  if (figures.idle) out.push(row('idle CPU ms/s: service + Postgres', (_x, t) => (t === 'proxy' && figures.idle ? `${num(figures.idle.serviceCpuMsPerSecond, 1)} + ${num(figures.idle.databaseCpuMsPerSecond, 1)}` : '')));
  if (figures.pickupMs !== undefined) out.push(row('requested deployment picked up, ms', (_x, t) => (t === 'proxy' ? num(figures.pickupMs, 0) : '')));
  if (targets.some((target) => s[target]?.errors)) out.push(row('non-2xx / errors / failed streams', (x) => String(x.errors)));
  return out;
}

export function textTable(table: string[][]): string {
  const widths = (table[0] ?? []).map((_, i) => Math.max(...table.map((row) => (row[i] ?? '').length)));
  return table.map((row) => row.map((value, i) => (i === 0 ? value.padEnd(widths[i] ?? 0) : value.padStart(widths[i] ?? 0))).join('   ').trimEnd()).join('\n');
}

const measured = (b: Budget) => (b.unit === 'x' ? `${num(b.value, 3)}x` : `${num(b.value)} ${b.unit}`);

export function textBudgets(list: Budget[]): string {
  const width = Math.max(...list.map((b) => b.name.length));
  const limitWidth = Math.max(...list.map((b) => b.limit.length));
  return list.map((b) => `  [${verdict(b.met).padEnd(6)}] ${b.name.padEnd(width)}  ${b.limit.padEnd(limitWidth)}  measured ${measured(b)}`).join('\n');
}

/** What a results page is called and which target and script wrote it (by default the proxy benchmark's). */
export interface MarkdownTitle {
  title: string;
  writtenBy: string;
  budgetsHeading: string;
}

const PROXY_TITLE: MarkdownTitle = {
  title: 'Proxy overhead benchmark: latest run',
  writtenBy: '`make bench` (bench/proxy-overhead.ts)',
  budgetsHeading: 'Budget (DESIGN.md §4)',
};

export function markdown(meta: Record<string, unknown>, table: string[][], list: Budget[], notes: string[], title: MarkdownTitle = PROXY_TITLE): string {
  const line = (row: string[]) => `| ${row.join(' | ')} |`;
  const lines = [
    `# ${title.title}`,
    '',
    `Run ${String(meta.started_at)}, ${String(meta.machine)}, commit ${String(meta.commit)}; written by ${title.writtenBy}.`,
    '',
    line(table[0] ?? []),
    line((table[0] ?? []).map((_, i) => (i === 0 ? '---' : '---:'))),
    ...table.slice(1).map(line),
    '',
    `| ${title.budgetsHeading} | Limit | Measured | |`,
    '|---|---|---:|---|',
    ...list.map((b) => line([b.name, b.limit, measured(b), verdict(b.met)])),
    '',
    ...notes.map((note) => `- ${note}`),
    '',
  ];
  return lines.join('\n');
}

/** The machine a run measured on, as its results name it. */
export const machineName = () => `${cpus().length} × ${cpus()[0]?.model.trim() ?? 'CPU'}, Node ${process.version}`;

/** The fields every result file starts with (and its page's first line reads): when, what was measured, on what machine and database. */
export function resultHead(run: { startedAt: Date; loadAtStart: number[] }, database: string) {
  return {
    started_at: run.startedAt.toISOString(),
    finished_at: new Date().toISOString(),
    commit: commitOf(ROOT),
    machine: machineName(),
    cpus: cpus().length,
    node: process.version,
    load_average_at_start: run.loadAtStart,
    database,
  };
}

/** A run's report on stdout: its table, each section (a title and its lines: the budgets among them), then the notes. */
export function printReport(table: string[][], sections: Array<{ title: string; lines: string[] }>, notes: string[]): void {
  out();
  out(textTable(table));
  for (const section of sections) {
    out();
    out(section.title);
    for (const line of section.lines) out(line);
  }
  out();
  for (const note of notes) out(`  ${note}`);
}

/**
 * Writes a run's figures to bench/results/<prefix><started_at>.json and its page to
 * <prefix>latest.md (the one the docs link), and says so.
 */
export function writeResults(prefix: string, figures: { started_at: string }, page: string): void {
  mkdirSync(RESULTS, { recursive: true });
  const stamp = figures.started_at.replace(/:/g, '-').replace(/\.\d+Z$/, 'Z');
  const jsonPath = path.join(RESULTS, `${prefix}${stamp}.json`);
  writeFileSync(jsonPath, `${JSON.stringify(figures, null, 2)}\n`);
  writeFileSync(path.join(RESULTS, `${prefix}latest.md`), page);
  out();
  out(`Wrote ${path.relative(ROOT, jsonPath)} and bench/results/${prefix}latest.md`);
}

/** The commit measured (with `+changes` when the work tree differs from it in what runs), for the results. */
export function commitOf(root: string): string {
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
    // Results of earlier runs (bench/results) are not what runs.
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'src', 'bench', 'migrations', 'package.json', ':!bench/results'], { cwd: root, encoding: 'utf8' }).trim();
    return dirty ? `${commit}+changes` : commit;
  } catch {
    return 'unknown';
  }
}
