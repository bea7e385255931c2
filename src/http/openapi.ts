import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { OpenAPIBackend, type Context, type Document, type Operation } from 'openapi-backend';
import addFormats from 'ajv-formats';
import { AppError } from '../errors.ts';
import type { Principal } from '../principal.ts';
import { authorize } from './authorization.ts';
import { forJsonSchemaValidators } from '../openapi-document.ts';
import { invalidRequest, isMissingBody, RequestContext, sendReply, type LooseHandler, type LooseReply } from './operation-call.ts';
import { OperationRouter, readOperationRules, type OperationRules } from './operations.ts';
import { setRoute } from './request-log.ts';
import type { Handlers, OperationId } from './types.ts';

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

/** The management API's OpenAPI binding, in two middlewares: one before anything reads the body, one after. */
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
  /** openapi-backend over the document, initialized: the gateway uses its validators too. */
  api: OpenAPIBackend;
  /**
   * The router of every operation of the document, compiled once: the gateway matches each request
   * with it first, and `route` reuses that match (`req.routeMatch`) for a request handed over.
   */
  router: OperationRouter<Operation>;
  /** The rules of every operation, read once from the document. */
  rules: ReadonlyMap<string, OperationRules>;
}

/**
 * openapi-backend over the document: request validation with query coercion, defaults and formats.
 * Validators are compiled on first use: compiling the request and response validators of every
 * operation up front costs over 100 MB, most of it for routes a process never serves.
 */
function openApiBackend(document: Document): OpenAPIBackend {
  return new OpenAPIBackend({
    definition: forJsonSchemaValidators(document),
    strict: true,
    quick: true,
    coerceTypes: true,
    ajvOpts: { allErrors: true, useDefaults: true },
    customizeAjv: (ajv) => {
      addFormats.default(ajv);
      return ajv;
    },
  });
}

/**
 * Binds the OpenAPI document, as it is, to the handlers of the management API, on openapi-backend
 * as published (`handleRequest`, its security handlers, `postResponseHandler`): routing, security,
 * request validation, roles, 404/405, and response validation. The document's route rules
 * (`x-required-role`, `x-error-format`, `x-body-limit`, `x-csrf-exempt`) are read here, once; an
 * operation without a handler or without its rules stops the start. The inference operations are
 * served by the gateway (inference/gateway.ts) and never reach this binding.
 */
export async function bindOpenApi(options: OpenApiOptions): Promise<OpenApiBinding> {
  const { document, handlers, validateResponses } = options;
  assertEveryOperationHasAHandler(document, handlers);
  const rules = readOperationRules(document);
  const rulesOf = (operation: Operation): OperationRules => rules.get(operation.operationId ?? '') as OperationRules;

  const api = openApiBackend(document);
  const schemes = Object.keys(document.components?.securitySchemes ?? {});
  for (const scheme of schemes) {
    if (!(scheme in options.security)) throw new Error(`No security handler for the scheme ${scheme} of the OpenAPI document.`);
    api.registerSecurityHandler(scheme, options.security[scheme as keyof SecurityHandlers]);
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
      // Sent by postResponseHandler, unless the handler answered itself.
      return handler(
        new RequestContext(operationRules, req, res, {
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
      // A body the handler reads as it streams (multipart) is checked part by part there, never
      // held for the validator: its absence is expected.
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
  // The operation of each request, known before its body is read (its limit, its error format).
  const router = new OperationRouter(api.router.getOperations());

  return {
    api,
    rules,
    router,
    route: function routeMiddleware(req: Request, res: Response, next: NextFunction) {
      const { operation, atPath } = req.routeMatch ?? router.match(req.method, req.path);
      if (operation) {
        req.operation = rulesOf(operation);
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
        const request = { method: req.method, path: req.path, body: req.body, query: req.query as Record<string, string>, headers: req.headers as Record<string, string> };
        await api.handleRequest(request, req, res);
      } catch (error) {
        next(error);
      }
    },
  };
}

/** The result of the security handler that succeeded, if any (a failed one holds `{error}`). */
function authenticatedPrincipal(context: Context): unknown {
  for (const scheme of ['ApiKeyBearer', 'SessionCookie']) {
    const result = context.security?.[scheme] as { error?: unknown } | undefined;
    if (result && !result.error) return result;
  }
  return undefined;
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
