/**
 * What this process holds live, in bytes (V8's heap in use and the memory of Buffers and other
 * ArrayBuffers), measured after a full collection so garbage not collected yet is not counted.
 * Needs `--expose-gc`, and `--no-concurrent-array-buffer-sweeping` so the collection has freed
 * dead Buffers before they are counted: swept on another thread, they were still counted after it
 * (40 MB of a finished upload seen on a busy machine). vitest.config.ts gives both to every worker.
 */
export function liveBytes(): number {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with --expose-gc: without a collection, garbage not collected yet counts as held');
  if (!process.execArgv.includes('--no-concurrent-array-buffer-sweeping')) throw new Error('run with --no-concurrent-array-buffer-sweeping: dead Buffers swept on another thread still count as held');
  gc();
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return heapUsed + arrayBuffers;
}

/**
 * The most this process held live above what it held before, while `work` ran: `liveBytes()`
 * sampled every `everyMs` (each sample collects garbage first, so this counts what is held, not
 * what passed through).
 */
export async function peakLiveGrowth(work: () => Promise<void>, everyMs = 250): Promise<number> {
  const baseline = liveBytes();
  let peak = baseline;
  const sampler = setInterval(() => (peak = Math.max(peak, liveBytes())), everyMs);
  try {
    await work();
  } finally {
    clearInterval(sampler);
  }
  return Math.max(peak, liveBytes()) - baseline;
}
