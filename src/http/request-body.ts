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
      const length = operation.csrfExempt ? undefined : plainJsonLength(req, operation.bodyLimit);
      if (length !== undefined) return readPlainJson(req, length, next);
      parserFor(operation.bodyLimit, operation.csrfExempt)(req, res, next);
    },
    (req, _res, next) => {
      const issue = nulInQuery(req) ?? (req.body === undefined ? undefined : unsafeJson(req.body));
      if (!issue) return next();
      next(new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', { errors: [issue], inference: { code: 'invalid_parameter' } }));
    },
  ];
}

/**
 * The length of a body sent as most clients send JSON: `Content-Type: application/json` (or with
 * `charset=utf-8`), no `Content-Encoding`, a `Content-Length` of 1 to `limit` bytes. Such a body is
 * read by `readPlainJson`; any other (compressed, chunked, empty, over the limit, another charset)
 * by body-parser, whose answers (413, 415, `{}` for an empty body) it keeps. body-parser's reading
 * (type-is, content-type, raw-body, iconv-lite) was 3 % of the proxy's CPU at 64 connections.
 */
function plainJsonLength(req: Request, limit: number): number | undefined {
  const { 'content-type': type, 'content-encoding': encoding, 'content-length': declared } = req.headers;
  if (encoding !== undefined || declared === undefined || req.headers['transfer-encoding'] !== undefined) return undefined;
  if (type !== 'application/json' && !PLAIN_JSON_TYPE.test(type ?? '')) return undefined;
  const length = Number(declared);
  return Number.isInteger(length) && length > 0 && length <= limit ? length : undefined;
}

const PLAIN_JSON_TYPE = /^application\/json\s*(;\s*charset\s*=\s*"?utf-8"?\s*)?$/i;

/**
 * Reads a body `plainJsonLength` accepted and parses it as body-parser would: UTF-8 with a leading
 * byte-order mark dropped, an object or an array at the top (its strict mode), `req.body` set; a
 * body that is not JSON fails with body-parser's `entity.parse.failed` (400), a request its client
 * abandoned with `request.aborted`. The HTTP parser delivers exactly `length` bytes.
 */
function readPlainJson(req: Request, length: number, next: NextFunction): void {
  const chunks: Buffer[] = [];
  const done = (error?: Error) => {
    req.off('data', onData);
    req.off('end', onEnd);
    req.off('close', onClose);
    req.off('error', onClose);
    next(error);
  };
  const onData = (chunk: Buffer) => void chunks.push(chunk);
  const onEnd = () => {
    const text = (chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, length)).toString('utf8');
    const json = text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
    const first = /\S/.exec(json)?.[0];
    try {
      if (first !== '{' && first !== '[') throw new SyntaxError(`Unexpected token ${first ?? 'end'}: a JSON body is an object or an array`);
      req.body = JSON.parse(json) as unknown;
    } catch (error) {
      return done(Object.assign(error as Error, { type: 'entity.parse.failed', status: 400 }));
    }
    done();
  };
  // The client left before sending the whole body (an error, or a close before the end).
  const onClose = () => done(Object.assign(new Error('request aborted'), { type: 'request.aborted', status: 400 }));
  req.on('data', onData);
  req.on('end', onEnd);
  req.on('close', onClose);
  req.on('error', onClose);
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
