import { invalidRequest, missingParam } from './errors.ts';
import type { FormParams, FormValue } from './form.ts';
import type { StripeObject, StripeStore } from './store.ts';
import type { WebhookSender } from './webhooks.ts';

/** What every route of the emulator is given, and the small helpers they share. */
export interface Context {
  store: StripeStore;
  webhooks: WebhookSender;
  /** Where the emulator's own pages live (checkout, invoices, portal). */
  baseUrl: string;
  /** The API request being served, as events name it in `request`. */
  request: { id: string; idempotency_key: string | null };
}

/** The one path parameter the emulator's routes have (`/v1/customers/:id`). */
export interface PathParams {
  id: string;
}

export interface Route {
  method: 'GET' | 'POST' | 'DELETE';
  /** `/v1/customers/:id` */
  path: string;
  /**
   * Parameters Stripe accepts on this endpoint (`expand` always), in bracket notation with `[]` for
   * an array element (`items[][price]`); an entry allows everything below it (`metadata`). Any
   * other parameter is refused with `parameter_unknown`, naming it as sent (`items[0][colour]`).
   */
  params: string[];
  required?: string[];
  handle(ctx: Context, params: FormParams, path: PathParams): unknown;
}

export function emit(ctx: Context, type: string, object: StripeObject | { id: string; object: string }, previous?: Record<string, unknown>): void {
  ctx.webhooks.emit(type, object as StripeObject, { previous, request: ctx.request });
}

export function str(params: FormParams, name: string): string | undefined {
  const value = params[name];
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw invalidRequest(`Invalid string: ${name}`, { param: name });
  return value;
}

export function requiredStr(params: FormParams, name: string): string {
  const value = str(params, name);
  if (value === undefined || value === '') throw missingParam(name);
  return value;
}

export function int(params: FormParams, name: string): number | undefined {
  const value = str(params, name);
  if (value === undefined) return undefined;
  if (!/^-?\d+$/.test(value)) throw invalidRequest(`Invalid integer: ${value}`, { param: name });
  return Number(value);
}

export function bool(params: FormParams, name: string): boolean | undefined {
  const value = str(params, name);
  if (value === undefined) return undefined;
  if (value !== 'true' && value !== 'false') throw invalidRequest(`Invalid boolean: ${value}`, { param: name });
  return value === 'true';
}

export function record(params: FormParams, name: string): FormParams | undefined {
  const value = params[name];
  if (value === undefined || value === '') return undefined;
  if (typeof value !== 'object' || Array.isArray(value)) throw invalidRequest(`Invalid hash`, { param: name });
  return value;
}

export function array(params: FormParams, name: string): FormValue[] | undefined {
  const value = params[name];
  if (value === undefined || value === '') return undefined;
  if (!Array.isArray(value)) throw invalidRequest(`Invalid array`, { param: name });
  return value;
}

/** Metadata: string values, and `""` to unset a key (https://docs.stripe.com/api/metadata). */
export function mergeMetadata(current: Record<string, string>, update: FormParams | undefined): Record<string, string> {
  const merged = new Map(Object.entries(current));
  for (const [key, value] of Object.entries(update ?? {})) {
    if (typeof value !== 'string') throw invalidRequest('Invalid metadata value', { param: `metadata[${key}]` });
    if (value === '') merged.delete(key);
    else merged.set(key, value);
  }
  return Object.fromEntries(merged);
}

/**
 * A list object (https://docs.stripe.com/api/pagination): newest first, `limit` 1 to 100 (10 by
 * default), `starting_after` / `ending_before` a cursor id, `has_more`.
 */
export function list<T extends { id: string }>(url: string, items: T[], params: FormParams): { object: 'list'; data: T[]; has_more: boolean; url: string } {
  const limit = int(params, 'limit') ?? 10;
  if (limit < 1 || limit > 100) throw invalidRequest('Invalid value for limit: must be between 1 and 100', { param: 'limit' });
  const after = str(params, 'starting_after');
  const before = str(params, 'ending_before');
  let window = items;
  if (after) {
    const index = items.findIndex((item) => item.id === after);
    if (index < 0) throw invalidRequest(`No such object: '${after}'`, { param: 'starting_after', code: 'resource_missing' });
    window = items.slice(index + 1);
  } else if (before) {
    const index = items.findIndex((item) => item.id === before);
    if (index < 0) throw invalidRequest(`No such object: '${before}'`, { param: 'ending_before', code: 'resource_missing' });
    window = items.slice(Math.max(0, index - limit), index);
    return { object: 'list', data: window, has_more: index - limit > 0, url };
  }
  return { object: 'list', data: window.slice(0, limit), has_more: window.length > limit, url };
}

export const LIST_PARAMS = ['limit', 'starting_after', 'ending_before'];

/** A list endpoint's filter: the query parameter's value (strings for an array parameter; a range as JSON) against an object. */
export type ListFilter<T> = (item: T, value: string | string[]) => boolean;

/** List parameters that take a range object (`created[gte]=…`) as well as a value. */
const RANGE_PARAMS = new Set(['created']);

/**
 * Stripe's `created` list filter (https://docs.stripe.com/api/events/list): a Unix time the object
 * was created at, or a range of `gt`, `gte`, `lt`, `lte`.
 */
export function createdFilter<T extends { created: number }>(): ListFilter<T> {
  return (item, value) => {
    if (Array.isArray(value)) return false;
    if (!value.startsWith('{')) return item.created === Number(value);
    const range = JSON.parse(value) as Record<string, string>;
    const bound = (name: string) => (range[name] === undefined ? undefined : Number(range[name]));
    const [gt, gte, lt, lte] = ['gt', 'gte', 'lt', 'lte'].map(bound);
    return (gt === undefined || item.created > gt) && (gte === undefined || item.created >= gte) && (lt === undefined || item.created < lt) && (lte === undefined || item.created <= lte);
  };
}

/**
 * `GET` of a list of `object`s: newest first, paged, with each filter applied when its parameter is
 * sent, and each of `unlessSent` when its parameter is not (subscriptions hide canceled ones).
 */
export function listRoute<T extends { id: string }>(
  path: string,
  object: string,
  filters: Record<string, ListFilter<T>>,
  unlessSent: Record<string, (item: T) => boolean> = {},
): Route {
  return {
    method: 'GET',
    path,
    params: [...LIST_PARAMS, ...Object.keys(filters)],
    handle(ctx, params) {
      const tests: ((item: T) => boolean)[] = Object.entries(unlessSent).filter(([name]) => params[name] === undefined).map(([, test]) => test);
      for (const [name, filter] of Object.entries(filters)) {
        const value = params[name];
        if (value === undefined) continue;
        const range = typeof value === 'object' && !Array.isArray(value);
        if (range && (!RANGE_PARAMS.has(name) || Object.values(value).some((bound) => typeof bound !== 'string' || !/^\d+$/.test(bound)))) {
          throw invalidRequest(`Invalid value for ${name}`, { param: name });
        }
        const given = Array.isArray(value) ? value.map(String) : range ? JSON.stringify(value) : value;
        tests.push((item) => filter(item, given));
      }
      return list(path, ctx.store.all<T>(object, (item) => tests.every((test) => test(item))), params);
    },
  };
}

/** `GET` of one object by id (404 `resource_missing` otherwise). */
export function retrieveRoute(path: string, object: string): Route {
  return { method: 'GET', path, params: [], handle: (ctx, _params, { id }) => ctx.store.get(id, object) };
}

/** The first parameter the route does not accept, as sent (`recurring[colour]`), if any. */
export function unknownParameter(route: Route, params: FormParams): string | undefined {
  const leaves: [sent: string, pattern: string][] = [];
  const walk = (value: FormValue, sent: string, pattern: string) => {
    if (typeof value === 'string') leaves.push([sent, pattern]);
    else if (Array.isArray(value)) value.forEach((item, i) => walk(item, `${sent}[${i}]`, `${pattern}[]`));
    else for (const [key, item] of Object.entries(value)) walk(item, `${sent}[${key}]`, `${pattern}[${key}]`);
  };
  for (const [name, value] of Object.entries(params)) if (name !== 'expand') walk(value, name, name);
  const allowed = (pattern: string) => route.params.some((entry) => pattern === entry || pattern.startsWith(`${entry}[`));
  return leaves.find(([, pattern]) => !allowed(pattern))?.[0];
}
