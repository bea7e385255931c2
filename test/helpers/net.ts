import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/** The kernel's range of ports for outgoing connections and `listen(0)` (Linux; its default elsewhere). */
function ephemeralRange(): [number, number] {
  try {
    const [low, high] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    if (low && high) return [low, high];
  } catch {
    // Not Linux.
  }
  return [32768, 60999];
}

/**
 * A loopback port that was free a moment ago, for a server (often a child process) that binds it
 * later. Picked below the kernel's ephemeral range: a port `listen(0)` gives is in that range, where
 * any test's outgoing connection or `listen(0)` may take it before it is bound (`listen EADDRINUSE`
 * once in a full run); below it, only another pick of this function could, one in thousands.
 */
export async function freePort(): Promise<number> {
  const [low] = ephemeralRange();
  const floor = Math.max(1024, low - 12_000);
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = floor + Math.floor(Math.random() * (low - floor));
    const server = createServer();
    const bound = await new Promise<boolean>((resolve) => {
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (bound) {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      return port;
    }
  }
  throw new Error(`no free port below ${low}`);
}

/** Polls `probe` until it resolves true or the deadline passes. */
export async function waitUntil(probe: () => Promise<boolean>, what: string | (() => string), timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let delay = 25;
  while (Date.now() < deadline) {
    if (await probe().catch(() => false)) return;
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 500);
  }
  throw new Error(`Timed out after ${timeoutMs} ms waiting for ${typeof what === 'function' ? what() : what}`);
}

/** How long a propagation check keeps probing for the change (the requirement is checked by send times, not by this). */
const PROPAGATION_PATIENCE_MS = 15_000;

/**
 * A change made at `since` (a `performance.now()` taken once the change was answered) reaches what
 * `probe` asks within `deadlineMs` (DESIGN.md §3: revocation in every process within 1 s). Judged
 * by when each probe was sent, not by when it was answered: a probe answered "not yet" that was
 * sent more than `deadlineMs` after the change was served after the deadline, a real failure
 * however loaded the machine; a slow answer to a probe sent in time is not one. Probes until
 * the change is seen (at most 15 s).
 */
export async function seenWithin(probe: () => Promise<boolean>, since: number, deadlineMs: number, what: string): Promise<void> {
  const late: number[] = [];
  for (;;) {
    const sentAt = performance.now();
    if (await probe()) break;
    if (sentAt - since > deadlineMs) late.push(Math.round(sentAt - since));
    if (performance.now() - since > PROPAGATION_PATIENCE_MS) throw new Error(`${what}: not seen ${PROPAGATION_PATIENCE_MS} ms after the change`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  if (late.length) throw new Error(`${what}: still not seen by probes sent ${late.join(', ')} ms after the change (deadline ${deadlineMs} ms)`);
}
