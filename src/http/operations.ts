import type { Document } from 'openapi-backend';
import { ROLES } from '../principal.ts';
import type { Requirement } from './authorization.ts';
import type { OperationId } from './types.ts';

/** The shape of an operation's errors on the wire: RFC 9457 `Problem`, or the hosted-inference `{error: {…}}`. */
export type ErrorFormat = 'problem' | 'inference';

type SecurityRequirement = Record<string, string[]>;

/**
 * What the document says of one operation, read once when the binding starts; every rule of a
 * route lives in `spec/` as an `x-` extension and is used from here (docs/architecture.md: request flow).
 */
export interface OperationRules {
  operationId: OperationId;
  /** `POST /v1/chat/completions`: the route template, for logs (never the URL, which may carry tokens). */
  route: string;
  /** The security requirements (any one satisfies), the document's own when the operation has none. */
  security: readonly SecurityRequirement[];
  /** Accepts a bearer API key: the caller is authenticated before the body is read. */
  acceptsApiKey: boolean;
  /** `x-required-role`: what a session caller needs; undefined when the operation takes no session. */
  requiredRole: Requirement | undefined;
  /** `x-error-format`. */
  errorFormat: ErrorFormat;
  /** `x-body-limit`, in bytes; undefined when the operation documents no request body (none is read). */
  bodyLimit: number | undefined;
  /** The body is JSON, parsed before the binding; any other documented body (multipart) is read by the handler as it streams. */
  jsonBody: boolean;
  /** `x-csrf-exempt`: no `Origin` check; the operation takes no session and is verified by a signature over its raw body. */
  csrfExempt: boolean;
  /** `x-deprecation`: the `Deprecation` (RFC 9745) and `Sunset` (RFC 8594) headers of each answer; undefined when not deprecated. */
  deprecationHeaders: Readonly<Record<'Deprecation' | 'Sunset', string>> | undefined;
  /** The query parameters it documents (a NUL character in any of them is refused before it reaches a query). */
  queryParameters: readonly string[];
}

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;
const ERROR_FORMATS: readonly unknown[] = ['problem', 'inference'] satisfies ErrorFormat[];
const REQUIREMENTS: readonly unknown[] = ['signed-in', ...ROLES];

interface DocumentedOperation {
  operationId?: string;
  security?: SecurityRequirement[];
  requestBody?: { content?: Record<string, unknown> };
  parameters?: Array<{ name?: string; in?: string }>;
  'x-required-role'?: unknown;
  'x-error-format'?: unknown;
  'x-body-limit'?: unknown;
  'x-csrf-exempt'?: unknown;
  'x-deprecation'?: unknown;
}

/**
 * Reads the rules of every operation of the document, keyed by operationId. Fails closed: throws,
 * naming each operation at fault, when an operation that accepts the session cookie has no valid
 * `x-required-role` (or one that does not has one), an operation has no valid `x-error-format`, an
 * operation with a request body has no `x-body-limit` (or one without has one), a session operation
 * is `x-csrf-exempt`, or the operations of one path answer errors in different formats (a 405 on
 * that path answers in its format).
 */
export function readOperationRules(document: Document): Map<string, OperationRules> {
  const rules = new Map<string, OperationRules>();
  const faults: string[] = [];
  for (const [path, pathItem] of Object.entries(document.paths ?? {})) {
    const formats = new Set<unknown>();
    for (const method of METHODS) {
      const operation = pathItem?.[method] as DocumentedOperation | undefined;
      if (!operation?.operationId) continue;
      const id = operation.operationId;
      const security = operation.security ?? (document.security as SecurityRequirement[] | undefined) ?? [];
      const schemes = new Set(security.flatMap((requirement) => Object.keys(requirement)));
      const role = operation['x-required-role'];
      const format = operation['x-error-format'];
      const limit = operation['x-body-limit'];
      const exempt = operation['x-csrf-exempt'] ?? false;
      const content = operation.requestBody?.content;
      formats.add(format);

      if (schemes.has('SessionCookie') && !REQUIREMENTS.includes(role)) {
        faults.push(`${id} accepts the session cookie but its x-required-role is ${JSON.stringify(role)} (one of ${REQUIREMENTS.join(', ')})`);
      }
      if (!schemes.has('SessionCookie') && role !== undefined) faults.push(`${id} takes no session but has an x-required-role`);
      if (!ERROR_FORMATS.includes(format)) faults.push(`${id} has the x-error-format ${JSON.stringify(format)} (problem or inference)`);
      if (content && !(Number.isSafeInteger(limit) && (limit as number) > 0)) faults.push(`${id} has a request body but no x-body-limit (bytes)`);
      if (!content && limit !== undefined) faults.push(`${id} has an x-body-limit but no request body`);
      if (typeof exempt !== 'boolean') faults.push(`${id} has an x-csrf-exempt that is not a boolean`);
      if (exempt === true && schemes.has('SessionCookie')) faults.push(`${id} accepts the session cookie and cannot be x-csrf-exempt`);

      rules.set(id, {
        operationId: id as OperationId,
        route: `${method.toUpperCase()} ${path}`,
        security,
        acceptsApiKey: schemes.has('ApiKeyBearer'),
        requiredRole: role as Requirement | undefined,
        errorFormat: format as ErrorFormat,
        bodyLimit: content ? (limit as number) : undefined,
        jsonBody: content !== undefined && 'application/json' in content,
        csrfExempt: exempt === true,
        deprecationHeaders: deprecationHeaders(operation['x-deprecation']),
        queryParameters: (operation.parameters ?? []).filter((p) => p.in === 'query' && p.name).map((p) => p.name as string),
      });
    }
    if (formats.size > 1) faults.push(`the operations of ${path} answer errors in different x-error-formats`);
  }
  if (faults.length) throw new Error(`The OpenAPI document does not state every rule of its operations (spec/common/route-rules.tsp): ${faults.join('; ')}.`);
  return rules;
}

/** What the router found for a request: its operation, and every operation of the path (any method). */
export interface RouteMatch<T> {
  operation: T | undefined;
  atPath: readonly T[];
}

/**
 * Matches a method and path to an operation, once per request, with openapi-backend's own rules
 * (5.x `OpenAPIRouter.matchOperation`): the exact path with the method first, then the most
 * specific template (the longest literal part) that has the method; no operation at the path is a
 * 404, none with the method a 405. The patterns are compiled once, not per request.
 */
export class OperationRouter<T extends { path: string; method: string }> {
  readonly #exact = new Map<string, Map<string, T>>();
  readonly #bySpecificity: Array<{ operation: T; pattern: RegExp }>;

  constructor(operations: readonly T[]) {
    for (const operation of operations) {
      const methods = this.#exact.get(operation.path) ?? new Map<string, T>();
      if (!methods.has(operation.method)) methods.set(operation.method, operation);
      this.#exact.set(operation.path, methods);
    }
    const patterns = new Map<string, RegExp>();
    const patternOf = (path: string) => {
      const pattern = patterns.get(path) ?? new RegExp(`^${path.replace(/\{[^}]+\}/g, '\0').split('\0').map(escapeRegExp).join('[^/]+')}$`);
      patterns.set(path, pattern);
      return pattern;
    };
    const specificity = (path: string) => path.replace(/\{.*?\}/g, '').length;
    // A stable sort, as the library's: operations of equal specificity keep the document's order.
    this.#bySpecificity = operations.map((operation) => ({ operation, pattern: patternOf(operation.path) })).sort((a, b) => specificity(b.operation.path) - specificity(a.operation.path));
  }

  match(method: string, rawPath: string): RouteMatch<T> {
    const path = normalizePath(rawPath);
    const wanted = method.trim().toLowerCase();
    const exact = this.#exact.get(path)?.get(wanted);
    if (exact) return { operation: exact, atPath: [exact] };
    const atPath = this.#bySpecificity.filter(({ pattern }) => pattern.test(path)).map(({ operation }) => operation);
    return { operation: atPath.find((operation) => operation.method === wanted), atPath };
  }
}

/**
 * Reads the path parameters of a route template from a path it matches, each segment URI-decoded
 * as openapi-backend decodes them for the management API (so `/v1/models/a%2Fb` names `a/b`); a
 * segment that does not decode is kept as sent. Compiled once per template.
 */
export function pathParameters(template: string): (rawPath: string) => Record<string, string> {
  const names = [...template.matchAll(/\{([^}]+)\}/g)].map((match) => match[1] as string);
  if (!names.length) return () => ({});
  const pattern = new RegExp(`^${template.split(/\{[^}]+\}/).map(escapeRegExp).join('([^/]+)')}$`);
  return (rawPath) => {
    const values = pattern.exec(normalizePath(rawPath)) ?? [];
    return Object.fromEntries(names.map((name, i) => [name, decodeSegment(values[i + 1] ?? '')]));
  };
}

function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/** As openapi-backend normalizes a path for matching: a leading slash, no query string, no trailing slash. */
function normalizePath(raw: string): string {
  let path = raw.trim();
  if (!path.startsWith('/')) path = `/${path}`;
  path = path.split('?')[0] ?? '/';
  while (path.length > 1 && path.endsWith('/')) path = path.slice(0, -1);
  return path;
}

function escapeRegExp(literal: string): string {
  return literal.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** The headers of `x-deprecation: {since, sunset}` (dates), or undefined; throws on a malformed one. */
export function deprecationHeaders(deprecation: unknown): OperationRules['deprecationHeaders'] {
  if (deprecation === undefined) return undefined;
  const { since, sunset } = (deprecation ?? {}) as { since?: unknown; sunset?: unknown };
  const [from, until] = [Date.parse(String(since)), Date.parse(String(sunset))];
  if (Number.isNaN(from) || Number.isNaN(until)) throw new Error(`x-deprecation needs the dates since and sunset: ${JSON.stringify(deprecation)}`);
  return { Deprecation: `@${Math.floor(from / 1000)}`, Sunset: new Date(until).toUTCString() };
}
