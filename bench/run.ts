import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { openDatabase, type BenchDatabase } from './database.ts';
import { requireBuild, stopAll } from './processes.ts';
import { out } from './report.ts';

/**
 * The frame of one benchmark run, the same for every bench: its title, a note when the machine is
 * already busy, a temporary directory for the processes' logs (and an embedded Postgres), the run's
 * database, and its end, also on failure or Ctrl-C: what the bench opened released (the most recent
 * first), every process it started stopped, the database dropped, and the logs removed when it
 * measured (kept otherwise, to read what went wrong).
 */

export interface RunOptions {
  /** The first line the run prints. */
  title: string;
  /** The `make` target of the bench (it builds first), named when the build is missing. */
  make: string;
  /** The temporary directory's name starts with it. */
  workDirPrefix: string;
  /** Keep the logs even when the run measured (BENCH_KEEP_LOGS where a bench offers it). */
  keepLogs?: boolean;
}

export interface BenchRun {
  readonly startedAt: Date;
  /** Where each process writes its log (bench/processes.ts). */
  readonly logs: string;
  readonly loadAtStart: number[];
  /** The run's database (bench/database.ts), closed at the end: dropped, or kept as `keep`/`reuse` say. */
  openDatabase(options: Parameters<typeof openDatabase>[1]): Promise<BenchDatabase>;
  /** `release` runs at the end, before the processes are stopped; what it throws is ignored. */
  atEnd(release: () => unknown): void;
}

/** Runs `measure` in the frame; 0 when it measured (budgets missed or not: benchmarks report, tests assert), 1 when it failed. */
export async function benchRun(options: RunOptions, measure: (run: BenchRun) => Promise<void>): Promise<number> {
  const startedAt = new Date();
  const workDir = mkdtempSync(path.join(tmpdir(), options.workDirPrefix));
  const logs = path.join(workDir, 'logs');
  mkdirSync(logs);
  const releases: Array<() => unknown> = [];
  let database: BenchDatabase | undefined;
  let ok = false;

  const cleanup = async () => {
    for (const release of releases.splice(0).reverse()) {
      try {
        await release();
      } catch {
        // Released as far as it goes: the processes and the database still are.
      }
    }
    await stopAll();
    await database?.close().catch((error: unknown) => out(`could not drop the bench database: ${String(error)}`));
    database = undefined;
    if (ok && !options.keepLogs) rmSync(workDir, { recursive: true, force: true });
    else {
      rmSync(path.join(workDir, 'postgres'), { recursive: true, force: true });
      out(`logs kept in ${logs}`);
    }
  };
  let interrupted = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (interrupted) return;
    interrupted = true;
    out(`\n${signal}: stopping everything this run started`);
    void cleanup().finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  try {
    out(options.title);
    const loadAtStart = loadavg();
    if ((loadAtStart[0] ?? 0) > 0.5) out(`  note: the machine is already busy (load average ${loadAtStart.map((v) => v.toFixed(2)).join(' ')}): figures will be noisier`);
    requireBuild(options.make);
    await measure({
      startedAt,
      logs,
      loadAtStart,
      async openDatabase(databaseOptions) {
        database = await openDatabase(workDir, databaseOptions);
        return database;
      },
      atEnd: (release) => void releases.push(release),
    });
    ok = true;
    return 0;
  } catch (error) {
    out(`\nBenchmark failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    return 1;
  } finally {
    await cleanup();
  }
}

/** A number from the environment, `fallback` when unset; anything else than a number >= `min` fails the run before it starts. */
export function setting(name: string, fallback: number, min = 0): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < min) throw new Error(`${name} must be a number >= ${min}, got ${JSON.stringify(raw)}`);
  return value;
}
