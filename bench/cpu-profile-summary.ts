/**
 * Summarises a V8 CPU profile (`node --cpu-prof`): self time per function and per package.
 *
 *   node bench/cpu-profile-summary.ts PROFILE.cpuprofile [--top 25] [--from S] [--to S]
 *
 * --from/--to keep the samples taken between S seconds after the profile started and S seconds
 * (the benchmark prints the proxy phases' windows, measured from the service's start, when it runs
 * with BENCH_CPU_PROF_DIR). Idle time and the (program)/(garbage collector) pseudo-frames are shown
 * apart from the functions.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface Summary {
  /** Milliseconds of samples in the window, idle included. */
  windowMs: number;
  idleMs: number;
  gcMs: number;
  programMs: number;
  functions: Array<{ name: string; where: string; ms: number }>;
  packages: Array<{ name: string; ms: number }>;
  /** Time of the samples whose stack holds a frame of the package (what it and everything it calls cost). */
  inclusivePackages: Array<{ name: string; ms: number }>;
}

/** Where a script comes from: a package, the project's own source, Node itself. */
export function origin(url: string): string {
  if (!url) return '(native)';
  if (url.startsWith('node:')) return 'node:internal';
  const modules = url.lastIndexOf('/node_modules/');
  if (modules >= 0) {
    const rest = url.slice(modules + '/node_modules/'.length).split('/');
    return rest[0]?.startsWith('@') ? `${rest[0]}/${rest[1]}` : (rest[0] ?? url);
  }
  const src = url.indexOf('/src/');
  if (src >= 0) return `src/${url.slice(src + 5).split('/')[0]}`;
  return url.replace(/^file:\/\//, '');
}

export function summarise(profile: Profile, options: { fromS?: number; toS?: number; top?: number } = {}): Summary {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const self = new Map<number, number>();
  let at = 0;
  let windowUs = 0;
  const from = (options.fromS ?? 0) * 1e6;
  const to = (options.toS ?? Infinity) * 1e6;
  for (let i = 0; i < profile.samples.length; i++) {
    const delta = profile.timeDeltas[i] ?? 0;
    at += delta;
    if (at < from || at > to) continue;
    const id = profile.samples[i] as number;
    self.set(id, (self.get(id) ?? 0) + delta);
    windowUs += delta;
  }
  const functions = new Map<string, { name: string; where: string; us: number }>();
  const packages = new Map<string, number>();
  let idle = 0;
  let gc = 0;
  let program = 0;
  for (const [id, us] of self) {
    const frame = byId.get(id)?.callFrame;
    if (!frame) continue;
    if (frame.functionName === '(idle)') idle += us;
    else if (frame.functionName === '(garbage collector)') gc += us;
    else if (frame.functionName === '(program)') program += us;
    else {
      const file = frame.url.replace(/^file:\/\//, '').replace(/^.*\/node_modules\//, '');
      const where = frame.url ? `${file.replace(/^.*\/(src|bench)\//, '$1/')}:${frame.lineNumber + 1}` : '(native)';
      const key = `${frame.functionName}@${where}`;
      const entry = functions.get(key) ?? { name: frame.functionName || '(anonymous)', where, us: 0 };
      entry.us += us;
      functions.set(key, entry);
      const pkg = origin(frame.url);
      packages.set(pkg, (packages.get(pkg) ?? 0) + us);
    }
  }
  const inclusive = new Map<string, number>();
  for (const [id, us] of self) {
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const frame = byId.get(at)?.callFrame;
      if (frame?.url) seen.add(origin(frame.url));
    }
    for (const pkg of seen) inclusive.set(pkg, (inclusive.get(pkg) ?? 0) + us);
  }
  const top = options.top ?? 25;
  return {
    windowMs: windowUs / 1000,
    idleMs: idle / 1000,
    gcMs: gc / 1000,
    programMs: program / 1000,
    functions: [...functions.values()]
      .sort((a, b) => b.us - a.us)
      .slice(0, top)
      .map((f) => ({ name: f.name, where: f.where, ms: f.us / 1000 })),
    packages: [...packages]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, us]) => ({ name, ms: us / 1000 })),
    inclusivePackages: [...inclusive]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, us]) => ({ name, ms: us / 1000 })),
  };
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { top: { type: 'string', default: '25' }, from: { type: 'string' }, to: { type: 'string' } },
  });
  const file = positionals[0];
  if (!file) {
    process.stderr.write('usage: node bench/cpu-profile-summary.ts PROFILE.cpuprofile [--top 25] [--from S] [--to S]\n');
    process.exit(2);
  }
  const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const summary = summarise(profile, {
    top: Number(values.top),
    fromS: values.from === undefined ? undefined : Number(values.from),
    toS: values.to === undefined ? undefined : Number(values.to),
  });
  const busy = summary.windowMs - summary.idleMs;
  const pct = (ms: number) => `${((ms / busy) * 100).toFixed(1).padStart(5)}%`;
  const write = (line = '') => process.stdout.write(`${line}\n`);
  write(`window ${(summary.windowMs / 1000).toFixed(1)} s: busy ${(busy / 1000).toFixed(2)} s, idle ${(summary.idleMs / 1000).toFixed(2)} s; of the busy time GC ${pct(summary.gcMs)}, (program) ${pct(summary.programMs)}`);
  write();
  write('self time by package / source folder:');
  for (const p of summary.packages) write(`  ${pct(p.ms)}  ${p.ms.toFixed(0).padStart(7)} ms  ${p.name}`);
  write();
  write('inclusive time by package / source folder (samples with one of its frames on the stack):');
  for (const p of summary.inclusivePackages) write(`  ${pct(p.ms)}  ${p.ms.toFixed(0).padStart(7)} ms  ${p.name}`);
  write();
  write('self time by function:');
  for (const f of summary.functions) write(`  ${pct(f.ms)}  ${f.ms.toFixed(0).padStart(7)} ms  ${f.name}  ${f.where}`);
}
