import type { IncomingMessage } from 'node:http';
import express, { type Request, type RequestHandler, type Response } from 'express';
import { AppError, type ValidationIssue } from '../errors.ts';

/** How deep a JSON body may nest (objects and arrays); deeper answers 422 `VALIDATION_FAILED`. */
export const MAX_JSON_DEPTH = 64;

/**
 * Most objects and arrays, object members (keys) and strings a JSON body may hold in all; more
 * answer 422 `VALIDATION_FAILED` (400 `invalid_parameter` on inference routes) before the body is
 * parsed. They bound what parsing may allocate: an empty object costs about 20 times its three
 * bytes of text (3.25 million of them in a 9.75 MB body took 670 MiB), a short string or a member
 * 5 to 10 times, a number or a long string a few times at most. The largest bodies the contract
 * allows in practice (2048 messages with tool calls, 128 tools with their schemas, 10,000 rerank
 * documents) hold about a tenth of each.
 */
export const MAX_JSON_CONTAINERS = 20_000;
export const MAX_JSON_MEMBERS = 100_000;
export const MAX_JSON_STRINGS = 200_000;
/**
 * The longest array a JSON body may hold (the longest the contract documents: 65,536 token ids), so
 * that no validation works through millions of items (a 9 MB array of numbers took 22 s).
 */
export const MAX_JSON_ARRAY_ITEMS = 65_536;

/**
 * Parses the JSON body of an operation that documents one with `express.json`, up to its
 * `x-body-limit` (413 `PAYLOAD_TOO_LARGE` beyond), unless it holds more objects, arrays or members
 * than parsing may cost (`jsonCostIssue`); then refuses a body nested deeper than 64 levels or with
 * a NUL character in a string or a name, and a documented query parameter with one (422
 * `VALIDATION_FAILED`). A body no operation reads (no route, a route without a request body) is not
 * read. The raw bytes are kept only for an `x-csrf-exempt` operation, which is verified by a
 * signature over them. The management API's; the inference gateway reads its own (`readJsonBody`).
 */
export function jsonBodies(): RequestHandler[] {
  const parserFor = jsonParsers();
  return [
    (req, res, next) => {
      const operation = req.operation;
      if (!operation?.jsonBody || operation.bodyLimit === undefined) return next();
      parserFor(operation.bodyLimit, operation.csrfExempt)(req, res, (error?: unknown) => next(parseFailure(error)));
    },
    (req, _res, next) => next(unsafeRequest(req)),
  ];
}

/**
 * Reads and checks the JSON body of an inference operation: a body sent as most clients send JSON
 * by `readPlainJson`, any other (compressed, chunked, another charset) by `express.json`; then the
 * checks of `jsonBodies`. Refuses with the error to answer.
 */
export function readJsonBody(req: Request, res: Response, limit: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (error?: unknown) => {
      const refusal = parseFailure(error) ?? unsafeRequest(req);
      if (refusal) reject(refusal);
      else resolve();
    };
    const length = plainJsonLength(req, limit);
    if (length !== undefined) readPlainJson(req, length, done);
    else inferenceParsers(limit, false)(req, res, done);
  });
}

/** `express.json` parsers, one per limit and raw-body need, each checking the cost of the bytes before they are parsed. */
function jsonParsers(): (limit: number, keepRaw: boolean) => RequestHandler {
  // body-parser calls `verify` with the (decompressed) bytes before it parses them.
  const verify = (keepRaw: boolean) => (req: IncomingMessage, _res: unknown, buffer: Buffer) => {
    const issue = jsonCostIssue(buffer);
    if (issue) throw Object.assign(new Error(issue.message), { costIssue: issue });
    if (keepRaw) (req as Request).rawBody = buffer;
  };
  const parsers = new Map<string, RequestHandler>();
  return (limit, keepRaw) => {
    const key = `${limit}/${keepRaw}`;
    const parser = parsers.get(key) ?? express.json({ limit, verify: verify(keepRaw) });
    parsers.set(key, parser);
    return parser;
  };
}

const inferenceParsers = jsonParsers();

/** The cost refusal of a body, as its error (body-parser's own errors go on to the error handler). */
function parseFailure(error: unknown): unknown {
  const costIssue = (error as { costIssue?: ValidationIssue } | undefined)?.costIssue;
  return costIssue ? tooCostly(costIssue) : error;
}

/** A NUL character in a documented query parameter, or a body nested too deep or holding one: its 422. */
function unsafeRequest(req: Request): AppError | undefined {
  const issue = nulInQuery(req) ?? (req.body === undefined ? undefined : unsafeJson(req.body));
  return issue && new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', { errors: [issue], inference: { code: 'invalid_parameter' } });
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
function readPlainJson(req: Request, length: number, next: (error?: Error) => void): void {
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
    const bytes = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, length);
    const costIssue = jsonCostIssue(bytes);
    if (costIssue) return done(tooCostly(costIssue));
    const text = bytes.toString('utf8');
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

function tooCostly(issue: ValidationIssue): AppError {
  return new AppError('VALIDATION_FAILED', `The JSON body ${issue.message}.`, { errors: [issue], inference: { code: 'invalid_parameter' } });
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const COMMA = 0x2c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;

/**
 * Why parsing the JSON text `bytes` would cost too much, if it would: more than
 * `MAX_JSON_CONTAINERS` objects and arrays, `MAX_JSON_MEMBERS` members or `MAX_JSON_STRINGS`
 * strings (names included), an array of more than `MAX_JSON_ARRAY_ITEMS`, or nesting deeper than
 * `MAX_JSON_DEPTH`. One pass over
 * the bytes outside strings; a string is skipped to its closing quote with `indexOf` (a quote or a
 * backslash byte never occurs inside a multi-byte UTF-8 character). Text that is not JSON is left
 * to the parser, which refuses it.
 */
export function jsonCostIssue(bytes: Buffer): ValidationIssue | undefined {
  let containers = 0;
  let members = 0;
  let strings = 0;
  // The commas seen so far in each open container: an array's, or -1 for an object's.
  const commas: number[] = [];
  for (let at = 0; at < bytes.length; at++) {
    const byte = bytes[at];
    if (byte === QUOTE) {
      if (++strings > MAX_JSON_STRINGS) return { location: 'body', message: `holds more than ${MAX_JSON_STRINGS} strings` };
      at = closingQuote(bytes, at);
      if (at < 0) return undefined;
    } else if (byte === OPEN_BRACE || byte === OPEN_BRACKET) {
      if (commas.length >= MAX_JSON_DEPTH) return { location: 'body', message: `nests deeper than ${MAX_JSON_DEPTH} levels` };
      if (++containers > MAX_JSON_CONTAINERS) return { location: 'body', message: `holds more than ${MAX_JSON_CONTAINERS} objects and arrays` };
      commas.push(byte === OPEN_BRACKET ? 0 : -1);
    } else if (byte === CLOSE_BRACE || byte === CLOSE_BRACKET) {
      commas.pop();
    } else if (byte === COMMA) {
      const top = commas.length - 1;
      if ((commas[top] as number) >= 0 && (commas[top] = (commas[top] as number) + 1) >= MAX_JSON_ARRAY_ITEMS) {
        return { location: 'body', message: `holds an array of more than ${MAX_JSON_ARRAY_ITEMS} items` };
      }
    } else if (byte === COLON) {
      if (++members > MAX_JSON_MEMBERS) return { location: 'body', message: `holds more than ${MAX_JSON_MEMBERS} object members` };
    }
  }
  return undefined;
}

/** Where the string opened at `open` closes (a quote not escaped by an odd run of backslashes); -1 if it does not. */
function closingQuote(bytes: Buffer, open: number): number {
  for (let at = bytes.indexOf(QUOTE, open + 1); at >= 0; at = bytes.indexOf(QUOTE, at + 1)) {
    let backslashes = 0;
    while (bytes[at - 1 - backslashes] === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return at;
  }
  return -1;
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
  if (typeof value === 'string') return value.includes('\u0000') ? locate(value, 'nul') : undefined;
  if (value === null || typeof value !== 'object') return undefined;
  // Only objects and arrays are stacked (a string is checked where it is met): no allocation per value.
  const stack: Array<{ container: object; depth: number }> = [{ container: value, depth: 0 }];
  const visit = (item: unknown, depth: number): boolean => {
    if (typeof item === 'string') return !item.includes('\u0000');
    if (item !== null && typeof item === 'object') stack.push({ container: item, depth });
    return true;
  };
  while (stack.length) {
    const { container, depth } = stack.pop() as { container: object; depth: number };
    if (depth >= MAX_JSON_DEPTH) return locate(value, 'depth');
    if (Array.isArray(container)) {
      for (const item of container) if (!visit(item, depth + 1)) return locate(value, 'nul');
    } else {
      for (const key in container) {
        if (key.includes('\u0000') || !visit((container as Record<string, unknown>)[key], depth + 1)) return locate(value, 'nul');
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
export function parseCookies(header: string | undefined): Record<string, string> {
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
