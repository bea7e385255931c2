import type { Request } from 'express';

/** The client's address for per-address limits (behind a proxy, as `TRUST_PROXY` allows). */
export function clientAddress(req: Request): string {
  return req.ip ?? req.socket.remoteAddress ?? 'unknown';
}
