import type { Request } from 'express';
import { AppError } from '../errors.ts';

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Refuses a state-changing request whose `Origin` is not allowed, unless it carries a bearer API
 * key (no ambient credential) or its operation is `x-csrf-exempt` (the payment processor's webhook,
 * verified by signature). Runs after the binding's route middleware (`req.operation`).
 */
export function originCheck(allowedOrigins: readonly string[]): (req: Request) => void {
  const allowed = new Set(allowedOrigins);
  return function checkOrigin(req: Request) {
    const origin = req.get('origin');
    if (!origin || SAFE_METHODS.has(req.method) || req.get('authorization') || req.operation?.csrfExempt) return;
    if (!allowed.has(origin)) throw new AppError('CSRF_FAILED', `Requests from the origin ${origin} are not allowed.`);
  };
}
