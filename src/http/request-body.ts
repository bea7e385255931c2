import type { IncomingMessage } from 'node:http';
import express, { type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import type { Context } from 'openapi-backend';
import type { Principal } from '../accounts/principal.ts';
import { AppError, type ValidationIssue } from '../errors.ts';
import { authorize } from './authorization.ts';
import type { SecurityHandlers } from './openapi.ts';

/** How deep a JSON body may nest (objects and arrays); deeper answers 422 `VALIDATION_FAILED`. */
export const MAX_JSON_DEPTH = 64;

/**
 * Authenticates a request to an operation that accepts API keys (the inference proxy) before a
 * byte of its body is read, with the same security handlers the OpenAPI binding runs (the binding
 * then reuses the result), and checks the caller's role. A request without a valid key or session
 * is answered 401 (403 for a role too low) with its body unread, so no one can make the service
 * parse a large body without credentials. The operation is the one the binding's route middleware
 * matched (`req.operation`).
 */
export function authenticateBeforeBody(security: SecurityHandlers): RequestHandler {
  return async function authenticateBeforeBodyMiddleware(req: Request, res: Response, next: NextFunction) {
    const operation = req.operation;
    if (!operation?.acceptsApiKey) return next();
    const context = {
      operation: { operationId: operation.operationId, security: operation.security },
      request: { method: req.method, path: req.path, headers: req.headers, cookies: parseCookies(req.headers.cookie), params: {}, query: {} },
    } as unknown as Context;
    try {
      // A session caller of a state-changing route also shows its CSRF token (the CsrfToken scheme).
      const sessionScheme = operation.security.some((requirement) => 'CsrfToken' in requirement) ? security.CsrfToken : security.SessionCookie;
      const principal = (req.headers.authorization ? await security.ApiKeyBearer(context, req, res) : await sessionScheme(context, req, res)) as
        | Principal
        | undefined;
      if (!principal) throw new AppError('UNAUTHENTICATED', 'Sign in, or send an API key, to use this route.', { inference: { code: 'missing_credentials' } });
      authorize(operation, principal);
      req.principal = principal;
      next();
    } catch (error) {
      next(error);
    }
  };
}

/**
 * Parses the JSON body of an operation that documents one, up to its `x-body-limit` (413
 * `PAYLOAD_TOO_LARGE` beyond); then refuses, for every route, a body nested deeper than 64 levels
 * or with a NUL character in a string or a name, and a documented query parameter with one (422
 * `VALIDATION_FAILED`; 400 `invalid_parameter` on inference routes). A body no operation reads (no route, a route without a request body) is
 * not read; a multipart body is read by its handler as it streams. The raw bytes are kept only for
 * an `x-csrf-exempt` operation, which is verified by a signature over them.
 */
export function jsonBodies(): RequestHandler[] {
  const keepRawBody = (req: IncomingMessage, _res: unknown, buffer: Buffer) => {
    (req as Request).rawBody = buffer;
  };
  const parsers = new Map<string, RequestHandler>();
  const parserFor = (limit: number, keepRaw: boolean): RequestHandler => {
    const key = `${limit}/${keepRaw}`;
    const parser = parsers.get(key) ?? express.json({ limit, ...(keepRaw ? { verify: keepRawBody } : {}) });
    parsers.set(key, parser);
    return parser;
  };
  return [
    (req, res, next) => {
      const operation = req.operation;
      if (!operation?.jsonBody || operation.bodyLimit === undefined) return next();
      parserFor(operation.bodyLimit, operation.csrfExempt)(req, res, next);
    },
    (req, _res, next) => {
      const issue = nulInQuery(req) ?? (req.body === undefined ? undefined : unsafeJson(req.body));
      if (!issue) return next();
      next(new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', { errors: [issue], inference: { code: 'invalid_parameter' } }));
    },
  ];
}

/** A documented query parameter with a NUL character (Postgres refuses them in text), if any. */
function nulInQuery(req: Request): { location: string; message: string } | undefined {
  const names = req.operation?.queryParameters;
  if (!names?.length || !req.url.includes('%00')) return undefined;
  const query = req.query as Record<string, unknown>;
  const name = names.find((candidate) => [query[candidate]].flat().some((value) => typeof value === 'string' && value.includes('\u0000')));
  return name ? { location: `query/${name}`, message: 'must not contain NUL characters (\\u0000)' } : undefined;
}

/** A body limit in words: `1 MiB`, `512 KiB`, `100 bytes`. */
export function bytesInWords(bytes: number): string {
  if (bytes % (1024 * 1024) === 0) return `${bytes / 1024 / 1024} MiB`;
  if (bytes % 1024 === 0) return `${bytes / 1024} KiB`;
  return `${bytes} bytes`;
}

/** The first place where `value` nests too deep or holds a NUL character, if any. Iterative: no stack to overflow. */
export function unsafeJson(value: unknown): ValidationIssue | undefined {
  const stack: Array<{ value: unknown; depth: number }> = [{ value, depth: 0 }];
  while (stack.length) {
    const { value: current, depth } = stack.pop() as { value: unknown; depth: number };
    if (typeof current === 'string') {
      if (current.includes('\u0000')) return locate(value, 'nul');
      continue;
    }
    if (current === null || typeof current !== 'object') continue;
    if (depth >= MAX_JSON_DEPTH) return locate(value, 'depth');
    if (Array.isArray(current)) {
      for (const item of current) stack.push({ value: item, depth: depth + 1 });
    } else {
      for (const [key, item] of Object.entries(current)) {
        if (key.includes('\u0000')) return locate(value, 'nul');
        stack.push({ value: item, depth: depth + 1 });
      }
    }
  }
  return undefined;
}

/** Finds the path of the problem `unsafeJson` saw (a second, rarer walk that is never deeper than the limit). */
function locate(root: unknown, problem: 'nul' | 'depth'): ValidationIssue {
  const walk = (value: unknown, at: string, depth: number): ValidationIssue | undefined => {
    if (typeof value === 'string') return problem === 'nul' && value.includes('\u0000') ? { location: at, message: 'must not contain NUL characters (\\u0000)' } : undefined;
    if (value === null || typeof value !== 'object') return undefined;
    if (depth >= MAX_JSON_DEPTH) return problem === 'depth' ? { location: at, message: `nests deeper than ${MAX_JSON_DEPTH} levels` } : undefined;
    for (const [key, item] of Object.entries(value)) {
      if (problem === 'nul' && key.includes('\u0000')) return { location: at, message: 'has a field name with a NUL character (\\u0000)' };
      const found = walk(item, `${at}/${key.replaceAll('\u0000', '\\u0000')}`, depth + 1);
      if (found) return found;
    }
    return undefined;
  };
  return walk(root, 'body', 0) ?? { location: 'body', message: problem === 'nul' ? 'must not contain NUL characters (\\u0000)' : `nests deeper than ${MAX_JSON_DEPTH} levels` };
}

/** The cookies of a `Cookie` header (the first value of each name wins, as browsers send the most specific first). */
function parseCookies(header: string | undefined): Record<string, string> {
  const cookies: Record<string, string> = {};
  for (const pair of (header ?? '').split(';')) {
    const at = pair.indexOf('=');
    if (at < 0) continue;
    const name = pair.slice(0, at).trim();
    if (!name || name in cookies) continue;
    let value = pair.slice(at + 1).trim();
    if (value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1);
    try {
      cookies[name] = decodeURIComponent(value);
    } catch {
      cookies[name] = value;
    }
  }
  return cookies;
}
