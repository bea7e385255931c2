import { randomUUID } from 'node:crypto';
import type { NextFunction, Request, Response } from 'express';
import type { Logger } from 'pino';

const INBOUND_ID = /^[A-Za-z0-9._:-]{8,128}$/;

/**
 * Gives every request an id (a well-formed inbound `X-Request-Id` is kept), echoes it on the
 * response, binds a child logger, and logs one line when the response ends. The line names the
 * route template, not the raw URL, so tokens carried in paths or queries never reach the logs.
 */
export function requestLog(logger: Logger) {
  return function requestLogMiddleware(req: Request, res: Response, next: NextFunction) {
    const inbound = req.get('x-request-id');
    req.id = inbound && INBOUND_ID.test(inbound) ? inbound : `req_${randomUUID().replaceAll('-', '')}`;
    req.log = logger.child({ request_id: req.id });
    res.setHeader('X-Request-Id', req.id);
    const started = process.hrtime.bigint();
    res.on('finish', () => {
      const durationMs = Number(process.hrtime.bigint() - started) / 1e6;
      const level = res.statusCode >= 500 ? 'error' : 'info';
      req.log[level]({ method: req.method, route: routeOf(res), status: res.statusCode, duration_ms: Math.round(durationMs * 100) / 100 }, 'request');
    });
    next();
  };
}

/** Handlers record the matched route template here; unmatched requests log as such. */
export function setRoute(res: Response, template: string): void {
  res.locals.route = template;
}

function routeOf(res: Response): string {
  return typeof res.locals.route === 'string' ? res.locals.route : '(unmatched)';
}
