import { createServer } from 'node:net';

/** A loopback port that was free a moment ago. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (!address || typeof address === 'string') throw new Error('no port');
  return address.port;
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
