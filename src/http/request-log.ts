import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Express, Request, Response } from 'express';
import type { Logger } from 'pino';
import { CLIENT_CLOSED, type Metrics } from '../metrics/metrics.ts';

export const INBOUND_ID = /^[A-Za-z0-9._:-]{8,128}$/;

/**
 * Request ids and access lines, with nothing done per request that the log level would not write
 * (docs/decisions/2026-11-23-request-ids-and-access-lines.md). Every request gets an id (a
 * well-formed inbound `X-Request-Id` is kept), echoed on the response; `req.log` is made the first
 * time something logs. An access line names the route template, never the URL (tokens travel in
 * some): at `info` and below from a close listener, at `warn` and `error` only for 5xx answers, by
 * `logFailedAnswer`. With `metrics`, one shared `close` listener feeds the HTTP histogram. Returns
 * the step that starts each request's record (the first of both planes).
 */
export function installRequestLog(app: Express, logger: Logger, metrics?: Metrics): (req: Request, res: Response) => void {
  Object.defineProperty(app.request, 'log', {
    configurable: true,
    get(this: Request): Logger {
      const log = logger.child({ request_id: this.id });
      Object.defineProperty(this, 'log', { value: log, writable: true, configurable: true });
      return log;
    },
    set(this: Request, value: Logger) {
      Object.defineProperty(this, 'log', { value, writable: true, configurable: true });
    },
  });
  const everyAnswer = logger.isLevelEnabled('info');
  const measured = metrics ? measureAnswer(metrics) : undefined;
  return function startRequest(req: Request, res: Response) {
    const inbound = req.get('x-request-id');
    req.id = inbound && INBOUND_ID.test(inbound) ? inbound : `req_${randomUUID().replaceAll('-', '')}`;
    res.setHeader('X-Request-Id', req.id);
    res.locals.startedAt = performance.now();
    if (everyAnswer) res.once('close', () => accessLine(req, res, res.headersSent ? res.statusCode : CLIENT_CLOSED));
    if (measured) res.on('close', measured);
  };
}

/**
 * The listener of an answer's `close` (which follows its end, or the client leaving): the
 * request's operation (the route template's, never the URL: bounded labels), the status sent, or
 * 499 when the client left before any, and the time since the request arrived.
 */
function measureAnswer(metrics: Metrics): (this: Response) => void {
  return function observeAnswer(this: Response) {
    const status = this.headersSent ? this.statusCode : CLIENT_CLOSED;
    metrics.httpRequest(this.req.operation?.operationId, status, (performance.now() - (this.locals.startedAt as number)) / 1000);
  };
}

/** The access line of a 5xx answer, where no finish listener writes one (`warn` and `error`); call it once the status is set. */
export function logFailedAnswer(req: Request, res: Response): void {
  if (res.statusCode >= 500 && !req.log.isLevelEnabled('info')) accessLine(req, res, res.statusCode);
}

function accessLine(req: Request, res: Response, status: number): void {
  const started = res.locals.startedAt as number;
  const level = status >= 500 && status !== CLIENT_CLOSED ? 'error' : 'info';
  req.log[level]({ method: req.method, route: routeOf(res), status, duration_ms: Math.round((performance.now() - started) * 100) / 100 }, 'request');
}

/** Handlers record the matched route template here; unmatched requests log as such. */
export function setRoute(res: Response, template: string): void {
  res.locals.route = template;
}

function routeOf(res: Response): string {
  return typeof res.locals.route === 'string' ? res.locals.route : '(unmatched)';
}
