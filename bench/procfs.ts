import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';

/**
 * What the kernel says about a process: CPU time from /proc/<pid>/stat (utime + stime, in clock
 * ticks) and memory from /proc/<pid>/status (VmRSS now, VmHWM the peak). Linux only.
 */

let ticksPerSecond: number | undefined;

/** `getconf CLK_TCK` (100 on practically every Linux), read once. */
export function clockTicksPerSecond(): number {
  if (ticksPerSecond === undefined) {
    let value = NaN;
    try {
      value = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    } catch {
      // getconf missing: fall through to the usual value.
    }
    ticksPerSecond = Number.isFinite(value) && value > 0 ? value : 100;
  }
  return ticksPerSecond;
}

/** User + system CPU time of the process so far, in milliseconds. */
export function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name (field 2) is in parentheses and may hold spaces: count fields after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const utime = Number(fields[11]); // field 14
  const stime = Number(fields[12]); // field 15
  return ((utime + stime) * 1000) / clockTicksPerSecond();
}

export interface Memory {
  rssMb: number;
  peakRssMb: number;
}

export function memory(pid: number): Memory {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rssMb: kb('VmRSS') / 1024, peakRssMb: kb('VmHWM') / 1024 };
}

/** Resets VmHWM to the current RSS (`echo 5 > /proc/<pid>/clear_refs`); false when not allowed. */
export function resetPeakRss(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

export interface ProcessUsage {
  cpuMs: number;
  /** Highest RSS seen: the larger of VmHWM (when it could be reset at the start) and the sampled VmRSS. */
  peakRssMb: number;
  /** Whether VmHWM was reset at the start, so the peak belongs to this window and not to start-up. */
  peakIsWindowed: boolean;
}

/** CPU time and peak RSS of one process over a window (a load phase). */
export class UsageWindow {
  readonly #pid: number;
  readonly #cpuStart: number;
  readonly #windowed: boolean;
  readonly #timer: NodeJS.Timeout;
  #maxRss = 0;

  constructor(pid: number, sampleMs = 100) {
    this.#pid = pid;
    this.#windowed = resetPeakRss(pid);
    this.#cpuStart = cpuMs(pid);
    this.#sample();
    this.#timer = setInterval(() => this.#sample(), sampleMs);
    this.#timer.unref();
  }

  #sample(): void {
    try {
      this.#maxRss = Math.max(this.#maxRss, memory(this.#pid).rssMb);
    } catch {
      // The process is gone; end() reports what was seen.
    }
  }

  end(): ProcessUsage {
    clearInterval(this.#timer);
    this.#sample();
    const used = cpuMs(this.#pid) - this.#cpuStart;
    const peak = memory(this.#pid).peakRssMb;
    return { cpuMs: used, peakRssMb: Math.max(this.#maxRss, peak), peakIsWindowed: this.#windowed };
  }
}

/** Busy and total CPU time of the whole machine so far (all cores, from the first line of /proc/stat), ms. */
export function machineCpuMs(): { busyMs: number; totalMs: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0] ?? '';
  const values = line.trim().split(/\s+/).slice(1, 9).map(Number); // user nice system idle iowait irq softirq steal
  const total = values.reduce((sum, value) => sum + value, 0);
  const idle = (values[3] ?? 0) + (values[4] ?? 0);
  const toMs = (ticks: number) => (ticks * 1000) / clockTicksPerSecond();
  return { busyMs: toMs(total - idle), totalMs: toMs(total) };
}

export interface MachineUsage {
  /** Share of all cores busy over the window, 0..1. */
  busy: number;
  /** CPU ms of the whole machine over the window. */
  busyMs: number;
  /** CPU ms of this process (the load generator) over the window. */
  loadGeneratorMs: number;
  /** Seconds the window lasted. */
  seconds: number;
  /** CPU ms of the Postgres backends of the bench database over the window (NaN when unknown). */
  databaseMs: number;
}

/** How busy the whole machine and this process (the load generator) were over a window. */
export class MachineWindow {
  readonly #start = machineCpuMs();
  readonly #self = process.cpuUsage();
  readonly #at = performance.now();

  end(): Omit<MachineUsage, 'databaseMs'> {
    const now = machineCpuMs();
    const self = process.cpuUsage(this.#self);
    const totalMs = now.totalMs - this.#start.totalMs;
    const busyMs = now.busyMs - this.#start.busyMs;
    return {
      busy: totalMs > 0 ? busyMs / totalMs : NaN,
      busyMs,
      loadGeneratorMs: (self.user + self.system) / 1000,
      seconds: (performance.now() - this.#at) / 1000,
    };
  }
}
