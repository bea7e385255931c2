import type { Request, Response } from 'express';
import type { AppError } from '../errors.ts';
import type { components } from '../../generated/api.d.ts';
import { logFailedAnswer } from './request-log.ts';

type Problem = components['schemas']['Problem'];
type InferenceError = components['schemas']['InferenceError'];

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

const INFERENCE_TYPES: Record<number, string> = {
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  429: 'rate_limit_error',
};

/** The status an inference route answers for an error: 400 for any request the client got wrong. */
export function inferenceStatus(error: AppError): number {
  return error.inference?.status ?? (error.status === 422 ? 400 : error.status);
}

/** The hosted-inference `code` of errors raised outside the proxy (parsing, validation, limits). */
function inferenceCode(error: AppError): string {
  if (error.inference) return error.inference.code;
  switch (error.code) {
    case 'MALFORMED_REQUEST':
      return 'invalid_json';
    case 'PAYLOAD_TOO_LARGE':
      return 'request_too_large';
    case 'VALIDATION_FAILED':
      return error.errors?.some((issue) => / is required$/.test(issue.message)) ? 'missing_required_parameter' : 'invalid_parameter';
    default:
      return error.code.toLowerCase();
  }
}

export function toInferenceError(error: AppError): InferenceError {
  const status = inferenceStatus(error);
  return {
    error: {
      message: error.message,
      type: INFERENCE_TYPES[status] ?? (status < 500 ? 'invalid_request_error' : 'server_error'),
      code: inferenceCode(error),
      param: error.inference?.param ?? error.errors?.[0]?.location.replace(/^body\//, '') ?? null,
    },
  };
}

/** Writes an error in the shape of the route it answers. */
export function sendError(req: Request, res: Response, error: AppError): void {
  if (res.headersSent) {
    res.destroy(error);
    return;
  }
  // A body left unread (refused before it was read: no credentials, a bad upload) is not drained:
  // the connection closes after the answer.
  if (!req.complete) res.setHeader('Connection', 'close');
  // Inference routes answer in the hosted-inference shape OpenAI-compatible clients parse (`x-error-format`).
  if (req.errorFormat === 'inference') {
    res.status(inferenceStatus(error)).set(error.headers).json(toInferenceError(error));
  } else {
    res.status(error.status).set(error.headers).json(toProblem(error, req.id));
  }
  logFailedAnswer(req, res);
}
