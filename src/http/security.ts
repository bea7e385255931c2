import type { NextFunction, Request, Response } from 'express';
import { AppError } from '../errors.ts';

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Refuses a state-changing request whose `Origin` is not allowed, unless it carries a bearer API
 * key (no ambient credential) or its operation is `x-csrf-exempt` (the payment processor's webhook,
 * verified by signature). Runs after the binding's route middleware (`req.operation`).
 */
export function originCheck(allowedOrigins: readonly string[]) {
  const allowed = new Set(allowedOrigins);
  return function originCheckMiddleware(req: Request, _res: Response, next: NextFunction) {
    const origin = req.get('origin');
    if (!origin || SAFE_METHODS.has(req.method) || req.get('authorization') || req.operation?.csrfExempt) return next();
    if (allowed.has(origin)) return next();
    next(new AppError('CSRF_FAILED', `Requests from the origin ${origin} are not allowed.`));
  };
}
