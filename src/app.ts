import type { IncomingMessage } from 'node:http';
import express, { type ErrorRequestHandler, type Express } from 'express';
import type { Logger } from 'pino';
import type { Document } from 'openapi-backend';
import { AppError, isAppError } from './errors.ts';
import { createOpenApiMiddleware, type SecurityHandlers } from './http/openapi.ts';
import { isInferencePath, sendError } from './http/problem.ts';
import { requestLog, setRoute } from './http/request-log.ts';
import { originCheck } from './http/security.ts';
import { securityHeaders } from './http/security-headers.ts';
import type { Handlers } from './http/types.ts';
import { docsAssets } from './platform/docs.ts';

/** Largest JSON body of a management route; larger ones answer 413 `PAYLOAD_TOO_LARGE`. */
export const JSON_BODY_LIMIT = '1mb';
/** Largest JSON body of an inference route (long prompts, many inputs). */
export const INFERENCE_JSON_BODY_LIMIT = '10mb';

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
}

/** Builds the Express application. No side effects: no listening, no connections opened. */
export async function createApp(options: AppOptions): Promise<Express> {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  app.set('trust proxy', options.trustProxy);

  app.use(requestLog(options.logger));
  app.use(securityHeaders({ hsts: options.hsts ?? false }));
  app.use((req, res, next) => {
    if (req.path.startsWith('/docs/assets/') || req.path.startsWith('/redoc/assets/')) setRoute(res, 'GET (docs assets)');
    next();
  }, docsAssets());
  const keepRawBody = (req: IncomingMessage, _res: unknown, buffer: Buffer) => {
    (req as express.Request).rawBody = buffer;
  };
  const managementJson = express.json({ limit: JSON_BODY_LIMIT, verify: keepRawBody });
  const inferenceJson = express.json({ limit: INFERENCE_JSON_BODY_LIMIT });
  app.use((req, res, next) => (isInferencePath(req.path) ? inferenceJson : managementJson)(req, res, next));
  app.use(originCheck(options.allowedOrigins));
  app.use(
    await createOpenApiMiddleware({
      document: options.document,
      handlers: options.handlers,
      security: options.security,
      validateResponses: options.validateResponses,
    }),
  );
  app.use(errorHandler);
  return app;
}

/** Maps every failure to the documented error shape; a 500 never carries a stack or SQL. */
const errorHandler: ErrorRequestHandler = (error, req, res, _next) => {
  sendError(req, res, toAppError(error, req));
};

function toAppError(error: unknown, req: express.Request): AppError {
  if (isAppError(error)) return error;
  const bodyError = error as { type?: string; status?: number };
  if (bodyError.type === 'entity.too.large') {
    const limit = isInferencePath(req.path) ? INFERENCE_JSON_BODY_LIMIT : JSON_BODY_LIMIT;
    return new AppError('PAYLOAD_TOO_LARGE', `The request body is larger than ${limit}.`, { inference: { code: 'request_too_large' } });
  }
  if (bodyError.type === 'entity.parse.failed') {
    return new AppError('MALFORMED_REQUEST', 'The request body is not valid JSON.');
  }
  if (bodyError.type === 'encoding.unsupported' || bodyError.type === 'charset.unsupported') {
    return new AppError('MALFORMED_REQUEST', 'The request body has an unsupported encoding.');
  }
  req.log.error({ err: error }, 'unhandled error');
  return new AppError('INTERNAL_ERROR', 'Something went wrong on our side. Quote the request id if you contact support.');
}
