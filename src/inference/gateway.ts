import type { ErrorObject } from 'ajv';
import type { Request, Response } from 'express';
import type { Context, OpenAPIBackend, Operation } from 'openapi-backend';
import { AppError } from '../errors.ts';
import { authorize } from '../http/authorization.ts';
import type { SecurityHandlers } from '../http/openapi.ts';
import { invalidRequest, isMissingBody, RequestContext, sendReply, type LooseHandler } from '../http/operation-call.ts';
import { pathParameters, type OperationRouter, type OperationRules } from '../http/operations.ts';
import { parseCookies, readJsonBody } from '../http/request-body.ts';
import { setRoute } from '../http/request-log.ts';
import type { Handlers, OperationId } from '../http/types.ts';
import type { Principal } from '../principal.ts';
import { answerRecorder, type RequestMetrics } from './request-metrics.ts';

/**
 * The data plane: the inference operations of the document (those that accept an API key), served
 * in one path read top to bottom, apart from the management API's Express binding. The same
 * document drives both: each operation's rules (operations.ts: role, body limit, error format) and
 * its validators, compiled once. What the management API has and this plane needs too (request
 * ids and access lines, hardening headers, the Origin check, error answers) is handed in as the
 * steps `before` and the `fail` answer, so both planes answer alike.
 *
 * It also answers what OpenAI clients meet at a URL the service does not have: under `/v1/`, a
 * path no operation of the document has (with any method), and an inference path called with a
 * method it does not serve, answer 404 `unknown_url` in the inference shape, as OpenAI answers
 * them (`/v1/responses`, `/v1/audio/speech`, …). A management path under `/v1/` is left to the
 * management API, whose 404s and 405s answer `Problem`.
 */
export interface InferenceGateway {
  /**
   * Answers the request when it is an inference operation's (its method and path), or an unknown
   * URL under `/v1/`, its failures by `fail` in the inference error shape; false, having done
   * nothing, for any other request.
   */
  serve(req: Request, res: Response): boolean;
}

export interface GatewayOptions {
  /** openapi-backend over the document, initialized (the management API's binding's): its operations and validators. */
  api: OpenAPIBackend;
  /** The router of every operation of the document (the binding's), which the management API matches with too. */
  router: OperationRouter<Operation>;
  /** Every operation's rules, read once from the document. */
  rules: ReadonlyMap<string, OperationRules>;
  /** The handlers of the inference operations (inference.handlers.ts). */
  handlers: Handlers;
  /** The same security handlers as the management API's: an API key, or a session and its CSRF token. */
  security: SecurityHandlers;
  /** Steps every request of both planes runs first, in order (request id, headers, Origin): each may throw. */
  before: ReadonlyArray<(req: Request, res: Response) => void>;
  /** Answers a failure, as the management API's error handler does. */
  fail: (error: unknown, req: Request, res: Response) => void;
  /** Validate each reply against the document (a mismatch becomes a 500). */
  validateResponses: boolean;
  /** Where each inference answer is counted for its deployment and API key (request-metrics.ts); none: not counted. */
  requestMetrics?: RequestMetrics | undefined;
}

export function createInferenceGateway(options: GatewayOptions): InferenceGateway {
  const { api } = options;
  // Each inference operation, by its operationId: its rules, handler and path parameters. Requests
  // are matched against every operation of the document (the router both planes share), so that a
  // path an inference and a management template would both match goes to the more specific one,
  // and the unknown URLs are told from the management API's own paths.
  const routes = new Map<string, Route>();
  for (const operation of api.router.getOperations()) {
    const rule = options.rules.get(operation.operationId ?? '') as OperationRules;
    if (!rule.acceptsApiKey) continue;
    routes.set(rule.operationId, { rule, operation, handler: options.handlers[rule.operationId] as unknown as LooseHandler, params: pathParameters(operation.path) });
  }
  const routeOf = (operation: Operation | undefined) => (operation ? routes.get(operation.operationId ?? '') : undefined);
  const recordAnswer = options.requestMetrics ? answerRecorder(options.requestMetrics) : undefined;

  /** The steps of an inference request, in order. */
  async function serve(route: Route, req: Request, res: Response): Promise<void> {
    const { rule, operation, handler } = route;
    // 1. Authenticated before a byte of the body is read: no one makes the service parse a body
    //    without credentials. A session caller of a state-changing route shows its CSRF token.
    const principal = await authenticate(rule, req, res);
    req.principal = principal;
    authorize(rule, principal);
    // 2. The body: JSON read and checked here; a multipart upload is read by its handler as it streams.
    if (rule.jsonBody && rule.bodyLimit !== undefined) await readJsonBody(req, res, rule.bodyLimit);
    // 3. Validated against the document, with the validators compiled once for the operation.
    const params = route.params(req.path);
    const body = validate(rule, operation.operationId as OperationId, req, params);
    // 4. The handler admits, routes, relays and meters (inference.service.ts); a relayed answer is
    //    written by it, a listing is sent here.
    const reply = await handler(new RequestContext(rule, req, res, { body, params, query: req.query, cookies: {}, auth: principal }));
    sendReply(api, operation, reply, req, res, options.validateResponses);
  }

  async function authenticate(rule: OperationRules, req: Request, res: Response): Promise<Principal> {
    const context = {
      operation: { operationId: rule.operationId, security: rule.security },
      request: { method: req.method, path: req.path, headers: req.headers, cookies: parseCookies(req.headers.cookie), params: {}, query: {} },
    } as unknown as Context;
    const sessionScheme = rule.security.some((requirement) => 'CsrfToken' in requirement) ? options.security.CsrfToken : options.security.SessionCookie;
    const principal = (req.headers.authorization ? await options.security.ApiKeyBearer(context, req, res) : await sessionScheme(context, req, res)) as Principal | undefined;
    if (!principal) throw new AppError('UNAUTHENTICATED', 'Sign in, or send an API key, to use this route.', { inference: { code: 'missing_credentials' } });
    return principal;
  }

  /** The request checked by the operation's validators (with their coercion and defaults): its body. */
  function validate(rule: OperationRules, operationId: OperationId, req: Request, params: Record<string, string>): unknown {
    const input: Record<string, unknown> = { path: params, query: req.query, header: req.headers, cookie: {} };
    if (typeof req.body === 'object' || req.is('application/json')) input.requestBody = req.body;
    const errors: ErrorObject[] = [];
    for (const check of api.validator.getRequestValidatorsForOperation(operationId)) {
      if (!check(input)) errors.push(...(check.errors ?? []));
    }
    // A multipart body is checked part by part by its handler (transcription-form.ts), never held for the validator.
    const issues = errors.filter((error) => rule.jsonBody || !isMissingBody(error));
    if (issues.length) throw invalidRequest(issues, rule);
    return input.requestBody;
  }

  /** What every request this plane answers starts with; false when a step refused it (answered). */
  function begin(req: Request, res: Response, rule: OperationRules | undefined): boolean {
    // What Express does for a request it routes (its `init`): the pair linked, the locals made.
    req.res = res;
    res.req = req;
    res.locals = Object.create(null) as Response['locals'];
    req.operation = rule;
    req.errorFormat = rule?.errorFormat ?? 'inference';
    try {
      for (const step of options.before) step(req, res);
      if (rule) setRoute(res, rule.route);
      if (rule?.deprecationHeaders) res.set(rule.deprecationHeaders);
      return true;
    } catch (error) {
      options.fail(error, req, res);
      return false;
    }
  }

  return {
    serve(req, res) {
      const match = options.router.match(req.method, req.path);
      const route = routeOf(match.operation);
      if (route) {
        // Every answer of an inference operation is counted as it closes, refusals included.
        if (recordAnswer) res.once('close', recordAnswer);
        if (begin(req, res, route.rule)) serve(route, req, res).catch((error: unknown) => options.fail(error, req, res));
        return true;
      }
      // An unknown URL: under /v1/, no operation at the path, or only inference ones with other methods.
      if (match.operation || !V1_PATH.test(req.path) || !match.atPath.every((other) => routeOf(other))) {
        req.routeMatch = match;
        return false;
      }
      if (begin(req, res, undefined)) options.fail(unknownUrl(req), req, res);
      return true;
    },
  };
}

/** An inference operation as the gateway serves it. */
interface Route {
  rule: OperationRules;
  operation: Operation;
  handler: LooseHandler;
  /** Reads its path parameters from the request's path. */
  params: (path: string) => Record<string, string>;
}

/** The paths OpenAI clients call (their base URL ends with `/v1`). */
const V1_PATH = /^\/v1(\/|$)/;

/** OpenAI's answer to a URL it does not have, with the method and path, pointing at this service's API reference. */
function unknownUrl(req: Request): AppError {
  return new AppError('NOT_FOUND', `Unknown request URL: ${req.method} ${req.path}. Please check the URL for typos, or see the API reference at /docs.`, {
    inference: { code: 'unknown_url', type: 'invalid_request_error' },
  });
}
