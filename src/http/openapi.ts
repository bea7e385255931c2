import type { NextFunction, Request, Response } from 'express';
import { OpenAPIBackend, type Context, type Document } from 'openapi-backend';
import type { ErrorObject } from 'ajv';
import addFormats from 'ajv-formats';
import { AppError, type ValidationIssue } from '../errors.ts';
import type { Principal } from '../accounts/principal.ts';
import { assertEverySessionOperationHasARole, authorize } from './authorization.ts';
import { setRoute } from './request-log.ts';
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

/**
 * Binds the OpenAPI document to the handlers: routing, security, request validation (with query
 * coercion and formats), 404/405, and response validation. Returns the Express middleware.
 */
export async function createOpenApiMiddleware(options: OpenApiOptions) {
  const { document, handlers, validateResponses } = options;
  assertEveryOperationHasAHandler(document, handlers);
  assertEverySessionOperationHasARole(document);

  const api = new OpenAPIBackend({
    definition: withMultipartBodiesUnchecked(withoutScalarExplode(structuredClone(document))),
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

  api.register({
    postRoutingHandler: (context: Context, req: Request, res: Response) => {
      if (context.operation) setRoute(res, `${req.method} ${context.operation.path}`);
    },
    notFound: () => {
      throw new AppError('NOT_FOUND', 'No route matches this path.');
    },
    methodNotAllowed: (context: Context, req: Request) => {
      const allowed = allowedMethods(api, req);
      throw new AppError('METHOD_NOT_ALLOWED', `${req.method} is not allowed here; use ${allowed.join(', ')}.`, {
        headers: { Allow: allowed.join(', ') },
      });
    },
    unauthorizedHandler: (context: Context, req: Request) => {
      throw securityFailure(context, Boolean(req.get('authorization')));
    },
    validationFail: (context: Context) => {
      throw new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', {
        errors: (context.validation.errors ?? []).map(toIssue),
      });
    },
  });

  for (const operationId of Object.keys(handlers) as OperationId[]) {
    const handler = handlers[operationId] as unknown as LooseHandler;
    api.register(operationId, async (context: Context, req: Request, res: Response) => {
      const handlerContext = {
        operationId,
        body: context.request.requestBody,
        // openapi-backend keeps coerced path parameters only in the validation result.
        params: { ...context.request.params, ...context.validation?.coerced?.params },
        query: context.request.query,
        headers: req.headers,
        cookies: context.request.cookies,
        auth: authenticatedPrincipal(context) as Principal | undefined,
        requestId: req.id,
        log: req.log,
        req,
        res,
      };
      authorize(operationId, handlerContext.auth);
      const reply = await handler(handlerContext);
      if (res.headersSent) return;
      if (validateResponses) {
        // A response documented without content (a redirect) has no body; openapi-backend would check it against `default`.
        const result = documentedWithoutContent(context.operation, reply.status)
          ? { errors: reply.body === undefined ? null : [{ message: 'must have no body' }] }
          : api.validateResponse(reply.body, context.operation, reply.status);
        if (result.errors) {
          req.log.error({ operationId, status: reply.status, errors: result.errors }, 'response does not match the OpenAPI document');
          throw new AppError('INTERNAL_ERROR', 'The server produced a response that does not match its contract.');
        }
      }
      res.status(reply.status);
      if (reply.headers) res.set(reply.headers);
      if (reply.body === undefined) {
        res.end();
      } else if (typeof reply.body === 'string' && res.get('Content-Type')) {
        res.send(reply.body);
      } else {
        res.json(reply.body);
      }
    });
  }

  await api.init();
  fastRouting(api);

  return async function openApiMiddleware(req: Request, res: Response, next: NextFunction) {
    try {
      await api.handleRequest(
        { method: req.method, path: req.path, body: req.body, query: req.query as Record<string, string>, headers: req.headers as Record<string, string> },
        req,
        res,
      );
    } catch (error) {
      next(error);
    }
  };
}

function preAuthenticated(scheme: string, principal: Principal): Principal | undefined {
  return (scheme === 'ApiKeyBearer') === (principal.kind === 'apiKey') ? principal : undefined;
}

/**
 * A multipart upload is streamed through, never held in memory, so its parts are checked as they
 * are read (inference/transcription-form.ts) rather than by the schema validator: its body stops
 * being `required` for the validator, which then checks path, query and headers as everywhere
 * (and a JSON body, if one is sent, against the multipart schema). Every other body is validated.
 */
function withMultipartBodiesUnchecked(document: Document): Document {
  for (const pathItem of Object.values(document.paths ?? {})) {
    for (const method of METHODS) {
      const body = pathItem?.[method]?.requestBody;
      if (body && !('$ref' in body) && Object.keys(body.content).every((type) => type.startsWith('multipart/'))) delete body.required;
    }
  }
  return document;
}

/** The result of the security handler that succeeded, if any (a failed one holds `{error}`). */
function authenticatedPrincipal(context: Context): unknown {
  for (const scheme of ['ApiKeyBearer', 'SessionCookie']) {
    const result = context.security?.[scheme] as { error?: unknown } | undefined;
    if (result && !result.error) return result;
  }
  return undefined;
}

function documentedWithoutContent(operation: Context['operation'], status: number): boolean {
  const response = operation.responses?.[String(status)];
  return response !== undefined && !('$ref' in response) && !response.content;
}

/**
 * TypeSpec writes `explode: false` on every query parameter, and openapi-backend then splits the
 * value of any such parameter at commas into an array, so a string or number fails validation (and
 * a string with a comma loses it). `explode` has no effect on a scalar (OpenAPI 3.0, Parameter
 * Object), so it is dropped wherever the schema is not an array.
 */
function withoutScalarExplode(document: Document): Document {
  const schemas = (document.components?.schemas ?? {}) as Record<string, { type?: string }>;
  const isArray = (schema: { type?: string; $ref?: string } | undefined): boolean =>
    schema?.type === 'array' || (schema?.$ref !== undefined && schemas[schema.$ref.split('/').pop() ?? '']?.type === 'array');
  const parameters: unknown[] = Object.values(document.components?.parameters ?? {});
  for (const pathItem of Object.values(document.paths ?? {})) {
    parameters.push(...(pathItem?.parameters ?? []));
    for (const method of METHODS) parameters.push(...(pathItem?.[method]?.parameters ?? []));
  }
  for (const parameter of parameters as Array<{ in?: string; explode?: boolean; schema?: { type?: string; $ref?: string } }>) {
    if (parameter.in === 'query' && parameter.explode === false && !isArray(parameter.schema)) delete parameter.explode;
  }
  return document;
}

/**
 * openapi-backend rebuilds its operation list (and compiles a regex per path template) on every
 * request; the document does not change after start-up, so routing uses one list and one set of
 * compiled patterns, with the same answers: exact paths first, then the most specific template.
 */
function fastRouting(api: OpenAPIBackend): void {
  const router = api.router;
  const operations = router.getOperations();
  router.getOperations = () => operations;
  const exact = new Map<string, Map<string, (typeof operations)[number]>>();
  const templates: Array<{ pattern: RegExp; specificity: number; byMethod: Map<string, (typeof operations)[number]> }> = [];
  for (const operation of operations) {
    if (!operation.path.includes('{')) {
      const methods = exact.get(operation.path) ?? new Map();
      methods.set(operation.method, operation);
      exact.set(operation.path, methods);
      continue;
    }
    const source = `^${operation.path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{[^}]+\\?\}/g, '[^/]+')}$`;
    let template = templates.find((t) => t.pattern.source === new RegExp(source).source);
    if (!template) {
      template = { pattern: new RegExp(source), specificity: operation.path.replace(/\{.*?\}/g, '').length, byMethod: new Map() };
      templates.push(template);
    }
    template.byMethod.set(operation.method, operation);
  }
  templates.sort((a, b) => b.specificity - a.specificity);
  const original = router.matchOperation.bind(router);
  router.matchOperation = ((request: { method: string; path: string }, strict?: boolean) => {
    const path = request.path.length > 1 ? request.path.replace(/\/+$/, '') : request.path;
    const method = request.method.toLowerCase();
    const exactMatch = exact.get(path);
    const found = exactMatch?.get(method) ?? (exactMatch ? undefined : templates.find((t) => t.pattern.test(path) && t.byMethod.has(method))?.byMethod.get(method));
    // Anything else (404, 405, odd paths) keeps the library's own answer.
    return found ?? original(request as never, strict as never);
  }) as typeof router.matchOperation;
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

function allowedMethods(api: OpenAPIBackend, req: Request): string[] {
  return METHODS.filter((method) => {
    try {
      return Boolean(api.router.matchOperation({ method, path: req.path, headers: {} }, true));
    } catch {
      return false;
    }
  }).map((method) => method.toUpperCase());
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
    failureOf('ApiKeyBearer') ??
    new AppError('UNAUTHENTICATED', 'Sign in to use this route.')
  );
}

function toIssue(error: ErrorObject): ValidationIssue {
  const [, where = '', ...rest] = error.instancePath.split('/');
  const location = [where === 'requestBody' ? 'body' : where, ...rest].filter(Boolean).join('/');
  if (error.keyword === 'additionalProperties' || (error.keyword === 'not' && error.schemaPath.includes('additionalProperties'))) {
    const field = 'additionalProperty' in error.params ? String(error.params.additionalProperty) : rest.at(-1);
    return { location, message: `unknown field \`${field}\` is not allowed` };
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
