import type { Request, Response } from 'express';
import type { OpenAPIBackend, Operation } from 'openapi-backend';
import type { ErrorObject } from 'ajv';
import type { Logger } from 'pino';
import { AppError, type ValidationIssue } from '../errors.ts';
import type { Principal } from '../principal.ts';
import type { OperationRules } from './operations.ts';
import { logFailedAnswer } from './request-log.ts';
import { reusedJson } from './reused-body.ts';
import type { OperationId } from './types.ts';

/**
 * Calling an operation's handler and answering with its reply: what both planes share, the
 * management API's binding (openapi.ts) and the inference gateway (inference/gateway.ts).
 */

/** The handler shape the planes work with; each handler's own type is checked in its map. */
/** A handler's reply when it has written the answer itself (a stream): the dispatcher sends nothing more. */
export const STREAMED = { status: 200, body: undefined } as never;

export type LooseHandler = (context: object) => Promise<LooseReply> | LooseReply;
export interface LooseReply {
  status: number;
  body?: unknown;
  headers?: Record<string, string | string[]>;
}

/** The request's parts as a plane read them. */
export interface CallParts {
  body: unknown;
  params: object;
  query: unknown;
  cookies: object;
  auth: Principal | undefined;
}

/**
 * A handler's context. A class, so that `log` is a getter of its prototype: an object literal with
 * a getter is built by the runtime's slow path on every request (bench/results: 1.4 % of the
 * proxy's CPU).
 */
export class RequestContext {
  readonly body: unknown;
  readonly params: object;
  readonly query: unknown;
  readonly cookies: object;
  readonly auth: Principal | undefined;
  readonly headers: Request['headers'];
  readonly requestId: string;
  readonly operationId: OperationId;
  readonly bodyLimit: number | undefined;
  readonly req: Request;
  readonly res: Response;

  constructor(rules: Pick<OperationRules, 'operationId' | 'bodyLimit'>, req: Request, res: Response, parts: CallParts) {
    this.operationId = rules.operationId;
    this.body = parts.body;
    this.params = parts.params;
    this.query = parts.query;
    this.cookies = parts.cookies;
    this.auth = parts.auth;
    this.headers = req.headers;
    this.bodyLimit = rules.bodyLimit;
    this.requestId = req.id;
    this.req = req;
    this.res = res;
  }

  /** Made on first use (request-log.ts): most requests never log. */
  get log(): Logger {
    return this.req.log;
  }
}

/**
 * The operation's reply, checked against the document when asked (RESPONSE_VALIDATION), then sent;
 * nothing when the handler answered itself (a relayed stream), or when the client left before any
 * answer (its access line says 499; the handler's placeholder reply is no contract mismatch).
 */
export function sendReply(api: OpenAPIBackend, operation: Operation, reply: LooseReply | undefined, req: Request, res: Response, validateResponses: boolean): void {
  if (!reply || res.headersSent) return;
  if (res.destroyed || req.socket.destroyed) {
    req.log.debug({ operationId: operation.operationId }, 'the client left before the answer');
    return;
  }
  if (validateResponses) assertDocumented(api, operation, reply, req);
  send(res, reply);
  logFailedAnswer(req, res);
}

/**
 * Throws (a 500, logged) when the reply is not what the document says the operation answers with
 * its status. A response documented without content (a redirect) has no body: openapi-backend's
 * `validateResponse` would check it against `default` instead.
 */
function assertDocumented(api: OpenAPIBackend, operation: Operation, reply: LooseReply, req: Request): void {
  const documented = operation.responses?.[String(reply.status)];
  const errors =
    documented !== undefined && !('$ref' in documented) && !documented.content
      ? reply.body === undefined
        ? null
        : [{ message: 'must have no body' }]
      : api.validateResponse(reply.body, operation, reply.status).errors;
  if (errors) {
    req.log.error({ operationId: operation.operationId, status: reply.status, errors }, 'response does not match the OpenAPI document');
    throw new AppError('INTERNAL_ERROR', 'The server produced a response that does not match its contract.');
  }
}

function send(res: Response, reply: LooseReply): void {
  res.status(reply.status);
  if (reply.headers) res.set(reply.headers);
  const reused = reusedJson(reply.body);
  if (reply.body === undefined) {
    res.end();
  } else if (reused) {
    if (!res.get('Content-Type')) res.type('json');
    res.send(reused);
  } else if (typeof reply.body === 'string' && res.get('Content-Type')) {
    res.send(reply.body);
  } else {
    res.json(reply.body);
  }
}

/** The validator's complaint that a required body is absent. */
export function isMissingBody(error: ErrorObject): boolean {
  return error.keyword === 'required' && error.params.missingProperty === 'requestBody';
}

/**
 * The refusal of a request its validators found invalid. On an inference route a top-level field
 * the contract does not name is refused as OpenAI refuses one: 400 `unsupported_parameter`,
 * "Unrecognized request argument supplied: <field>", with the field as `param`.
 */
export function invalidRequest(errors: ErrorObject[], rules: Pick<OperationRules, 'errorFormat'>): AppError {
  const issues = errors.map(toIssue);
  const unknown = rules.errorFormat === 'inference' ? errors.find((error) => error.instancePath === '/requestBody' && error.keyword === 'additionalProperties') : undefined;
  if (!unknown) return new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', { errors: issues });
  const field = String((unknown.params as { additionalProperty?: unknown }).additionalProperty).slice(0, 64);
  return new AppError('VALIDATION_FAILED', `Unrecognized request argument supplied: ${field}`, { errors: issues, inference: { code: 'unsupported_parameter', param: field } });
}

function toIssue(error: ErrorObject): ValidationIssue {
  const [, where = '', ...rest] = error.instancePath.split('/');
  const location = [where === 'requestBody' ? 'body' : where, ...rest].filter(Boolean).join('/');
  if (error.keyword === 'additionalProperties' || (error.keyword === 'not' && error.schemaPath.includes('additionalProperties'))) {
    // `additionalProperties: false` points at the object and names the field; `{not: {}}` pointed at the field.
    if ('additionalProperty' in error.params) {
      const field = String(error.params.additionalProperty);
      return { location: [location, field].filter(Boolean).join('/'), message: `unknown field \`${field}\` is not allowed` };
    }
    return { location, message: `unknown field \`${rest.at(-1)}\` is not allowed` };
  }
  if (error.keyword === 'required' && error.params.missingProperty === 'requestBody') {
    return { location: 'body', message: 'a JSON body is required (Content-Type: application/json)' };
  }
  if (error.keyword === 'required') {
    const field = String(error.params.missingProperty);
    return { location: location ? `${location}/${field}` : field, message: `\`${field}\` is required` };
  }
  return { location: location || where, message: error.message ?? 'is invalid' };
}
