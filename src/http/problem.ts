import type { Request, Response } from 'express';
import type { AppError, ErrorCode, InferenceAnswerCode, InferenceErrorCode, InferenceErrorType } from '../errors.ts';
import type { components } from '../../generated/api.d.ts';
import { logFailedAnswer } from './request-log.ts';

type Problem = components['schemas']['Problem'];
/** The hosted-inference error body: the document's `InferenceError`, whose `code` may also be `unknown_url` (errors.ts). */
type InferenceError = { error: Omit<components['schemas']['InferenceError']['error'], 'code'> & { code: InferenceAnswerCode | null } };

const PROBLEM_BASE = 'https://docs.model-deployment.example/errors/';

export function toProblem(error: AppError, requestId: string): Problem {
  return {
    type: PROBLEM_BASE + error.code.toLowerCase().replaceAll('_', '-'),
    title: error.title,
    status: error.status,
    detail: error.message,
    code: error.code,
    ...(error.errors ? { errors: error.errors } : {}),
    request_id: requestId,
  };
}

const INFERENCE_TYPES: Record<number, InferenceErrorType> = {
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  429: 'rate_limit_error',
};

/** The status an inference route answers for an error: 400 for any request the client got wrong. */
export function inferenceStatus(error: AppError): number {
  return error.inference?.status ?? (error.status === 422 ? 400 : error.status);
}

/** The hosted-inference `code` of errors raised without one (outside the proxy: parsing, security, limits). */
const INFERENCE_CODES: Partial<Record<ErrorCode, InferenceErrorCode>> = {
  MALFORMED_REQUEST: 'invalid_json',
  PAYLOAD_TOO_LARGE: 'request_too_large',
  UNAUTHENTICATED: 'missing_credentials',
  FORBIDDEN: 'insufficient_role',
  CSRF_FAILED: 'csrf_failed',
  NOT_FOUND: 'model_not_found',
  METHOD_NOT_ALLOWED: 'method_not_allowed',
  RATE_LIMITED: 'rate_limit_exceeded',
  NOT_IMPLEMENTED: 'not_implemented',
  SERVICE_UNAVAILABLE: 'service_unavailable',
};

function inferenceCode(error: AppError): InferenceAnswerCode {
  if (error.inference) return error.inference.code;
  if (error.code === 'VALIDATION_FAILED') {
    return error.errors?.some((issue) => / is required$/.test(issue.message)) ? 'missing_required_parameter' : 'invalid_parameter';
  }
  return INFERENCE_CODES[error.code] ?? 'internal_error';
}

export function toInferenceError(error: AppError): InferenceError {
  const status = inferenceStatus(error);
  return {
    error: {
      message: error.message,
      type: error.inference?.type ?? INFERENCE_TYPES[status] ?? (status < 500 ? 'invalid_request_error' : 'server_error'),
      code: inferenceCode(error),
      param: error.inference?.param ?? error.errors?.[0]?.location.replace(/^body\//, '') ?? null,
    },
  };
}

/** What a caller that is not authenticated may make the service discard of a body it did not read. */
export const UNREAD_BODY_DRAIN_BYTES = 1024 * 1024;

/** Writes an error in the shape of the route it answers. */
export function sendError(req: Request, res: Response, error: AppError): void {
  if (res.headersSent) {
    res.destroy(error);
    return;
  }
  // The client is gone (it left in the middle of its body): nobody reads an answer, and its access line says 499.
  if (req.socket.destroyed) return;
  if (!req.complete) settleUnreadBody(req, res, error);
  // Inference routes answer in the hosted-inference shape OpenAI-compatible clients parse (`x-error-format`).
  if (req.errorFormat === 'inference') {
    res.status(inferenceStatus(error)).set(error.headers).json(toInferenceError(error));
  } else {
    res.status(error.status).set(error.headers).json(toProblem(error, req.id));
  }
  logFailedAnswer(req, res);
}

/**
 * A body left unread by an answer given before it (no credentials, a model nothing serves, a limit):
 * its client may still be sending it, and closing at once would reset the connection under its
 * write, so a client that writes before it reads would never see the answer. The rest is drained
 * unparsed instead, up to the route's body limit for an authenticated caller, else
 * `UNREAD_BODY_DRAIN_BYTES`; a 413, or a body declared longer, closes the connection after the
 * answer (docs/decisions/2026-11-21-inference-proxy.md).
 */
function settleUnreadBody(req: Request, res: Response, error: AppError): void {
  const limit = req.principal ? (req.operation?.bodyLimit ?? UNREAD_BODY_DRAIN_BYTES) : Math.min(req.operation?.bodyLimit ?? UNREAD_BODY_DRAIN_BYTES, UNREAD_BODY_DRAIN_BYTES);
  const declared = Number(req.headers['content-length'] ?? 0);
  if (error.code === 'PAYLOAD_TOO_LARGE' || !(declared <= limit) || req.destroyed) {
    res.setHeader('Connection', 'close');
    return;
  }
  let drained = 0;
  req.on('data', (chunk: Buffer) => {
    drained += chunk.length;
    if (drained > limit) req.socket.destroy();
  });
  // Unpiped from a reader that stopped (an upload's parser), the request is paused.
  req.resume();
}
