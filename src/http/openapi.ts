import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { OpenAPIBackend, type Context, type Document, type Operation } from 'openapi-backend';
import type { ErrorObject } from 'ajv';
import type { Logger } from 'pino';
import addFormats from 'ajv-formats';
import { AppError, type ValidationIssue } from '../errors.ts';
import type { Principal } from '../principal.ts';
import { authorize } from './authorization.ts';
import { forJsonSchemaValidators } from '../openapi-document.ts';
import { OperationRouter, readOperationRules, type OperationRules } from './operations.ts';
import { logFailedAnswer, setRoute } from './request-log.ts';
import { reusedJson } from './reused-body.ts';
import type { Handlers, OperationId } from './types.ts';

/** The handler shape the dispatcher works with; each handler's own type is checked in its map. */
type LooseHandler = (context: object) => Promise<LooseReply> | LooseReply;
interface LooseReply {
  status: number;
  body?: unknown;
  headers?: Record<string, string | string[]>;
}

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;

export interface SecurityHandlers {
  /** Resolves the caller from the session cookie, or throws an AppError. */
  SessionCookie: (context: Context, req: Request, res: Response) => unknown;
  /** Checks the CSRF header against the session's token and resolves the session's caller, or throws an AppError. */
  CsrfToken: (context: Context, req: Request, res: Response) => unknown;
  /** Resolves the caller from a bearer API key, or throws an AppError. */
  ApiKeyBearer: (context: Context, req: Request, res: Response) => unknown;
}

export interface OpenApiOptions {
  document: Document;
  handlers: Handlers;
  security: SecurityHandlers;
  /** Validate each success response against the document; a mismatch becomes a 500. */
  validateResponses: boolean;
}

/** The OpenAPI binding, in two middlewares: one before anything reads the body, one after. */
export interface OpenApiBinding {
  /**
   * Matches the request to its operation, once: `req.operation` (its rules, see operations.ts) and
   * `req.errorFormat` (the operation's, or on a 405 that of the path's operations; `problem` when
   * nothing matches), so body parsing, the Origin check, early authentication and error answers
   * read the spec's rules instead of lists of paths.
   */
  route: RequestHandler;
  /** Security handlers, request validation, the role, the handler, response validation, 404 and 405. */
  dispatch: RequestHandler;
}

/**
 * Binds the OpenAPI document, as it is, to the handlers: routing, security, request validation
 * (with query coercion and formats), roles, 404/405, and response validation. The document's
 * route rules (`x-required-role`, `x-error-format`, `x-body-limit`, `x-csrf-exempt`) are read here,
 * once; an operation without a handler or without its rules stops the start.
 */
export async function bindOpenApi(options: OpenApiOptions): Promise<OpenApiBinding> {
  const { document, handlers, validateResponses } = options;
  assertEveryOperationHasAHandler(document, handlers);
  const rules = readOperationRules(document);
  const rulesOf = (operation: Operation): OperationRules => rules.get(operation.operationId ?? '') as OperationRules;

  const api = new OpenAPIBackend({
    definition: forJsonSchemaValidators(document),
    strict: true,
    // Validators are compiled on first use: compiling the request and response validators of every
    // operation up front costs over 100 MB, most of it for routes a process never serves.
    quick: true,
    coerceTypes: true,
    ajvOpts: { allErrors: true, useDefaults: true },
    customizeAjv: (ajv) => {
      addFormats.default(ajv);
      return ajv;
    },
  });

  const schemes = Object.keys(document.components?.securitySchemes ?? {});
  for (const scheme of schemes) {
    if (!(scheme in options.security)) throw new Error(`No security handler for the scheme ${scheme} of the OpenAPI document.`);
    const handler = options.security[scheme as keyof SecurityHandlers];
    // An inference caller was authenticated before its body was read (request-body.ts): reuse that.
    api.registerSecurityHandler(scheme, (context: Context, req: Request, res: Response) =>
      req.principal ? preAuthenticated(scheme, req.principal) : handler(context, req, res),
    );
  }

  const operationHandlers = new Map<string, (context: Context, req: Request, res: Response) => Promise<LooseReply | undefined>>();
  for (const operationId of Object.keys(handlers) as OperationId[]) {
    const handler = handlers[operationId] as unknown as LooseHandler;
    const operationRules = rules.get(operationId) as OperationRules;
    const needsCredential = operationRules.security.length > 0 && operationRules.security.every((requirement) => Object.keys(requirement).length > 0);
    const dispatch = async (context: Context, req: Request, res: Response): Promise<LooseReply | undefined> => {
      const auth = authenticatedPrincipal(context) as Principal | undefined;
      // The handler's type promises a caller wherever the operation requires one (types.ts AuthOf).
      if (needsCredential && !auth) throw new Error(`The operation ${operationId} requires a credential but no security handler resolved a caller`);
      authorize(operationRules, auth);
      // Sent by postResponseHandler, unless the handler answered itself (a relayed stream).
      return handler(
        handlerContext(operationId, operationRules, req, res, {
          body: context.request.requestBody,
          // openapi-backend keeps coerced path parameters only in the validation result.
          params: { ...context.request.params, ...context.validation?.coerced?.params },
          query: context.request.query,
          cookies: context.request.cookies,
          auth,
        }),
      );
    };
    operationHandlers.set(operationId, dispatch);
    api.register(operationId, dispatch);
  }

  api.register({
    notFound: () => {
      throw new AppError('NOT_FOUND', 'No route matches this path.');
    },
    methodNotAllowed: (context: Context, req: Request) => {
      const allowed = allowedMethods(router, req);
      throw new AppError('METHOD_NOT_ALLOWED', `${req.method} is not allowed here; use ${allowed.join(', ')}.`, {
        headers: { Allow: allowed.join(', ') },
      });
    },
    unauthorizedHandler: (context: Context, req: Request) => {
      throw securityFailure(context, Boolean(req.get('authorization')));
    },
    postResponseHandler: (context: Context, req: Request, res: Response) => {
      sendReply(api, context.operation, context.response as LooseReply | undefined, req, res, validateResponses);
    },
    validationFail: (context: Context, req: Request, res: Response) => {
      // A body the handler reads as it streams (multipart) is checked part by part there
      // (inference/transcription-form.ts), never held for the validator: its absence is expected.
      const streamed = !rulesOf(context.operation).jsonBody;
      const errors = (context.validation.errors ?? []).filter((error) => !(streamed && isMissingBody(error)));
      if (!errors.length) {
        // As openapi-backend does after a validation that passes: the request with coerced types.
        context.request = api.router.parseRequest(context.validation.coerced, context.operation);
        return operationHandlers.get(context.operation.operationId ?? '')?.(context, req, res);
      }
      throw invalidRequest(errors, rulesOf(context.operation));
    },
  });

  await api.init();
  const router = fixedRouting(api);
  const direct = directDispatch(api, rules, handlers, validateResponses);

  return {
    route: function routeMiddleware(req: Request, res: Response, next: NextFunction) {
      const { operation, atPath } = router.match(req.method, req.path);
      if (operation) {
        req.operation = rulesOf(operation);
        req.matchedOperation = operation;
        setRoute(res, req.operation.route);
        // On every answer of a deprecated operation, errors included (docs/api-for-sdk-teams.md: deprecation policy).
        if (req.operation.deprecationHeaders) res.set(req.operation.deprecationHeaders);
      }
      const formatOf = operation ?? atPath[0];
      req.errorFormat = formatOf ? rulesOf(formatOf).errorFormat : 'problem';
      next();
    },
    dispatch: async function dispatchMiddleware(req: Request, res: Response, next: NextFunction) {
      try {
        const operation = req.matchedOperation;
        const fast = req.principal && operation ? direct.get(operation.operationId ?? '') : undefined;
        if (fast && operation) return await fast(req, res, operation);
        const request = { method: req.method, path: req.path, body: req.body, query: req.query as Record<string, string>, headers: req.headers as Record<string, string> };
        await api.handleRequest(Object.assign(request, { [MATCHED]: operation }), req, res);
      } catch (error) {
        next(error);
      }
    },
  };
}

/**
 * The operations that accept API keys (inference), dispatched without openapi-backend's
 * per-request machinery once their caller was authenticated before the body was read
 * (request-body.ts): the request is not parsed again (three times per request there), no security
 * handler runs again, no context is built. What it did is kept: the request is checked by the
 * operation's own validators (compiled once, on first use, with the same coercion and defaults),
 * the role is checked, and the reply is checked and sent as postResponseHandler does. Only
 * operations whose parameters are all headers take this path (the inference ones: X-CSRF-Token).
 */
function directDispatch(
  api: OpenAPIBackend,
  rules: Map<string, OperationRules>,
  handlers: Handlers,
  validateResponses: boolean,
): Map<string, (req: Request, res: Response, operation: Operation) => Promise<void>> {
  const direct = new Map<string, (req: Request, res: Response, operation: Operation) => Promise<void>>();
  for (const operation of api.router.getOperations()) {
    const operationId = operation.operationId as OperationId;
    const operationRules = rules.get(operationId);
    // Header parameters are checked against the request's headers; path, query or cookie ones would need openapi-backend's parsing.
    const onlyHeaders = (operation.parameters ?? []).every((parameter) => 'in' in parameter && parameter.in === 'header');
    if (!operationRules?.acceptsApiKey || !onlyHeaders) continue;
    const handler = handlers[operationId] as unknown as LooseHandler;
    direct.set(operationId, async (req, res) => {
      const auth = req.principal as Principal;
      authorize(operationRules, auth);
      const input: Record<string, unknown> = { path: {}, query: req.query, header: req.headers, cookie: {} };
      if (typeof req.body === 'object' || req.is('application/json')) input.requestBody = req.body;
      const errors: ErrorObject[] = [];
      for (const validate of api.validator.getRequestValidatorsForOperation(operationId)) {
        if (!validate(input)) errors.push(...(validate.errors ?? []));
      }
      // As in validationFail: a multipart body is checked part by part by its handler.
      const issues = errors.filter((error) => operationRules.jsonBody || !isMissingBody(error));
      if (issues.length) throw invalidRequest(issues, operationRules);
      const reply = await handler(handlerContext(operationId, operationRules, req, res, { body: input.requestBody, params: {}, query: req.query, cookies: {}, auth }));
      sendReply(api, operation, reply, req, res, validateResponses);
    });
  }
  return direct;
}

/** What a handler is called with: the request's parts as the binding read them, and the operation's rules. */
function handlerContext(
  operationId: OperationId,
  rules: OperationRules,
  req: Request,
  res: Response,
  parts: { body: unknown; params: object; query: unknown; cookies: object; auth: Principal | undefined },
) {
  return new RequestContext(operationId, rules.bodyLimit, req, res, parts);
}

/**
 * A handler's context. A class, so that `log` is a getter of its prototype: an object literal with
 * a getter is built by the runtime's slow path on every request (1.4 % of the proxy's CPU).
 */
class RequestContext {
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

  constructor(
    operationId: OperationId,
    bodyLimit: number | undefined,
    req: Request,
    res: Response,
    parts: { body: unknown; params: object; query: unknown; cookies: object; auth: Principal | undefined },
  ) {
    this.operationId = operationId;
    this.body = parts.body;
    this.params = parts.params;
    this.query = parts.query;
    this.cookies = parts.cookies;
    this.auth = parts.auth;
    this.headers = req.headers;
    this.bodyLimit = bodyLimit;
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
function sendReply(api: OpenAPIBackend, operation: Operation, reply: LooseReply | undefined, req: Request, res: Response, validateResponses: boolean): void {
  if (!reply || res.headersSent) return;
  if (res.destroyed || req.socket.destroyed) {
    req.log.debug({ operationId: operation.operationId }, 'the client left before the answer');
    return;
  }
  if (validateResponses) assertDocumented(api, operation, reply, req);
  send(res, reply);
  logFailedAnswer(req, res);
}

function preAuthenticated(scheme: string, principal: Principal): Principal | undefined {
  return (scheme === 'ApiKeyBearer') === (principal.kind === 'apiKey') ? principal : undefined;
}

/** The validator's complaint that a required body is absent. */
function isMissingBody(error: ErrorObject): boolean {
  return error.keyword === 'required' && error.params.missingProperty === 'requestBody';
}

/** The result of the security handler that succeeded, if any (a failed one holds `{error}`). */
function authenticatedPrincipal(context: Context): unknown {
  for (const scheme of ['ApiKeyBearer', 'SessionCookie']) {
    const result = context.security?.[scheme] as { error?: unknown } | undefined;
    if (result && !result.error) return result;
  }
  return undefined;
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

/** Where the route middleware leaves the operation it matched, for openapi-backend's routing step. */
const MATCHED = Symbol('matched operation');

/**
 * openapi-backend rebuilds its operation list (and compiles a regex per path template) on every
 * request; the document does not change after start-up, so routing uses one list and one router
 * (operations.ts) with the library's answers, and the operation the route middleware matched is
 * not matched again.
 */
function fixedRouting(api: OpenAPIBackend): OperationRouter<Operation> {
  const library = api.router;
  const operations = library.getOperations();
  library.getOperations = () => operations;
  const router = new OperationRouter(operations);
  library.matchOperation = ((request: { method: string; path: string; [MATCHED]?: Operation }, strict?: boolean) => {
    const matched = request[MATCHED];
    if (matched) return matched;
    const { operation, atPath } = router.match(request.method, request.path);
    if (operation || !strict) return operation;
    throw new Error(atPath.length ? '405-methodNotAllowed: this method is not registered for the route' : '404-notFound: no route matches request');
  }) as typeof library.matchOperation;
  return router;
}

function assertEveryOperationHasAHandler(document: Document, handlers: Handlers): void {
  const documented = new Set<string>();
  for (const pathItem of Object.values(document.paths ?? {})) {
    for (const method of METHODS) {
      const operationId = pathItem?.[method]?.operationId;
      if (operationId) documented.add(operationId);
    }
  }
  const missing = [...documented].filter((id) => !(id in handlers));
  const unknown = Object.keys(handlers).filter((id) => !documented.has(id));
  if (missing.length || unknown.length) {
    throw new Error(
      `Handlers do not match the OpenAPI document. Missing: ${missing.join(', ') || 'none'}. Unknown: ${unknown.join(', ') || 'none'}.`,
    );
  }
}

function allowedMethods(router: OperationRouter<Operation>, req: Request): string[] {
  const { atPath } = router.match(req.method, req.path);
  return METHODS.filter((method) => atPath.some((operation) => operation.method === method)).map((method) => method.toUpperCase());
}

/** The failure to report: the API key's when one was sent, else the session's. */
function securityFailure(context: Context, keySent: boolean): AppError {
  const failureOf = (scheme: string) => {
    const error = (context.security?.[scheme] as { error?: unknown } | undefined)?.error;
    return error instanceof AppError ? error : undefined;
  };
  return (
    (keySent ? failureOf('ApiKeyBearer') : undefined) ??
    failureOf('SessionCookie') ??
    failureOf('CsrfToken') ??
    failureOf('ApiKeyBearer') ??
    new AppError('UNAUTHENTICATED', 'Sign in to use this route.')
  );
}

/**
 * The refusal of a request its validators found invalid. On an inference route a top-level field
 * the contract does not name is refused as OpenAI refuses one: 400 `unsupported_parameter`,
 * "Unrecognized request argument supplied: <field>", with the field as `param`.
 */
function invalidRequest(errors: ErrorObject[], rules: OperationRules): AppError {
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
