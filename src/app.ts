import express, { type ErrorRequestHandler, type Request, type RequestHandler, type Response } from 'express';
import type { Logger } from 'pino';
import type { Document } from 'openapi-backend';
import { PaymentProcessorError } from './billing/payment-processor.ts';
import { isTransactionConflict } from './db/transactions.ts';
import { AppError, isAppError } from './errors.ts';
import { bindOpenApi, type SecurityHandlers } from './http/openapi.ts';
import type { HttpService } from './http/server.ts';
import { sendError } from './http/problem.ts';
import { installRequestLog, setRoute } from './http/request-log.ts';
import { bytesInWords, jsonBodies } from './http/request-body.ts';
import { createInferenceGateway } from './inference/gateway.ts';
import type { RequestMetrics } from './inference/request-metrics.ts';
import { originCheck } from './http/security.ts';
import { securityHeaders } from './http/security-headers.ts';
import type { Handlers } from './http/types.ts';
import type { Metrics } from './metrics/metrics.ts';
import { docsAssets } from './platform/docs.ts';

export interface AppOptions {
  logger: Logger;
  document: Document;
  handlers: Handlers;
  security: SecurityHandlers;
  allowedOrigins: readonly string[];
  trustProxy: boolean | number | string;
  validateResponses: boolean;
  /** Send Strict-Transport-Security (production, behind HTTPS). */
  hsts?: boolean;
  /** Where each answer is measured (docs/operating.md: Metrics); none when metrics are off. */
  metrics?: Metrics | undefined;
  /**
   * Pages of a local stand-in answered before the API's routes: the local web app's landings
   * (dev/web-app/), which only `make run`'s entry (dev/main.ts) passes, as its LOCAL_WEB_APP
   * says. Without them those paths are unknown to the API (404).
   */
  localPages?: RequestHandler | undefined;
  /** Where each inference answer is counted for its deployment and API key (inference/request-metrics.ts). */
  requestMetrics?: RequestMetrics | undefined;
}

/** Where docsAssets() serves (its router matches paths case-insensitively, as Express does). */
const DOCS_ASSET_PATH = /^\/(docs|redoc)\/assets(\/|$)/i;

/**
 * Builds the service: one listener that sends each request to its plane. The inference operations
 * go to the gateway (inference/gateway.ts: API keys, the body read after authentication, a relay
 * per request); every other request to the management API, an Express app on openapi-backend as
 * published (sessions, CSRF, Problem errors). No side effects: no listening, no connections opened.
 */
export async function createApp(options: AppOptions): Promise<HttpService> {
  const binding = await bindOpenApi({
    document: options.document,
    handlers: options.handlers,
    security: options.security,
    validateResponses: options.validateResponses,
  });
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  app.set('trust proxy', options.trustProxy);

  // What every request of both planes goes through first: its id and access line, the hardening headers.
  const startRequest = installRequestLog(app, options.logger, options.metrics);
  const setSecurityHeaders = securityHeaders({ hsts: options.hsts ?? false });
  const checkOrigin = originCheck(options.allowedOrigins);
  const gateway = createInferenceGateway({
    api: binding.api,
    router: binding.router,
    rules: binding.rules,
    handlers: options.handlers,
    security: options.security,
    validateResponses: options.validateResponses,
    before: [startRequest, setSecurityHeaders, checkOrigin],
    fail: (error, req, res) => sendError(req, res, toAppError(error, req)),
    requestMetrics: options.requestMetrics,
  });

  const assets = docsAssets();
  const step =
    (run: (req: Request, res: Response) => void): RequestHandler =>
    (req, res, next) => {
      run(req, res);
      next();
    };
  app.use(step(startRequest));
  app.use(step(setSecurityHeaders));
  // The documentation's static files.
  app.use((req, res, next) => {
    if (!DOCS_ASSET_PATH.test(req.path)) return next();
    setRoute(res, 'GET (docs assets)');
    assets(req, res, next);
  });
  if (options.localPages) app.use(options.localPages);
  // Each request is matched to its operation once, before anything reads its body: the Origin
  // check, body parsing and error answers follow that operation's rules.
  app.use(binding.route);
  app.use(step((req) => checkOrigin(req)));
  app.use(jsonBodies());
  app.use(binding.dispatch);
  app.use(errorHandler);

  return {
    app,
    listener: (req, res) => {
      if (!gateway.serve(req as Request, res as Response)) app(req, res);
    },
  };
}

/** Maps every failure to the documented error shape; a 500 never carries a stack or SQL. */
const errorHandler: ErrorRequestHandler = (error, req, res, _next) => {
  sendError(req, res, toAppError(error, req));
};

function toAppError(error: unknown, req: express.Request): AppError {
  if (isAppError(error)) return error;
  if (error instanceof PaymentProcessorError) {
    req.log.warn({ err: error, processorCode: error.processorCode, processorStatus: error.processorStatus }, 'payment processor failed');
    return new AppError('PAYMENT_PROCESSOR_ERROR', 'The payment processor failed the request; nothing was changed. Try again.');
  }
  const bodyError = error as { type?: string; status?: number; limit?: number };
  if (bodyError.type === 'entity.too.large') {
    const limit = bytesInWords(req.operation?.bodyLimit ?? bodyError.limit ?? 0);
    return new AppError('PAYLOAD_TOO_LARGE', `The request body is larger than ${limit}.`, { inference: { code: 'request_too_large' } });
  }
  if (bodyError.type === 'request.aborted') {
    // The client closed the connection before the end of its body: nobody reads this answer, and
    // nothing failed on our side (its access line says 499).
    return new AppError('MALFORMED_REQUEST', 'The request body ended before its declared length.');
  }
  if (bodyError.type === 'entity.parse.failed') {
    return new AppError('MALFORMED_REQUEST', 'The request body is not valid JSON.');
  }
  if (bodyError.type === 'encoding.unsupported' || bodyError.type === 'charset.unsupported') {
    return new AppError('MALFORMED_REQUEST', 'The request body has an unsupported encoding.');
  }
  if (isTransactionConflict(error)) {
    // Still colliding after its retries (retryingTransaction): nothing was changed, and trying again works.
    req.log.warn({ err: error }, 'a transaction kept colliding with others');
    return new AppError('SERVICE_UNAVAILABLE', 'Your change collided with other changes made at the same moment; nothing was changed. Try again.', {
      headers: { 'Retry-After': '1' },
    });
  }
  req.log.error({ err: error }, 'unhandled error');
  return new AppError('INTERNAL_ERROR', 'Something went wrong on our side. Quote the request id if you contact support.');
}
