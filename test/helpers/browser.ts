import createClient, { type Client } from 'openapi-fetch';
import type { paths } from '../../generated/api.d.ts';
import { APP_ORIGIN } from './app.ts';
import { checkResponse } from './contract.ts';

export interface Cookie {
  name: string;
  value: string;
  attributes: Record<string, string | true>;
}

export function parseSetCookie(header: string): Cookie {
  const [pair = '', ...rest] = header.split(';').map((part) => part.trim());
  const separator = pair.indexOf('=');
  const attributes: Record<string, string | true> = {};
  for (const attribute of rest) {
    const [key = '', ...value] = attribute.split('=');
    attributes[key.toLowerCase()] = value.length ? value.join('=') : true;
  }
  return { name: pair.slice(0, separator), value: pair.slice(separator + 1), attributes };
}

/** The service's API as the generated types describe it: a renamed route or field breaks the test at compile time. */
export type Api = Client<paths>;

/**
 * The typed client over `fetch`, with every answer checked against the document (contract.ts),
 * unless `fetch` checks them itself.
 */
export function typedClient(
  base: string,
  fetch: (request: Request) => Promise<Response>,
  options: { headers?: Record<string, string>; checked?: boolean } = {},
): Api {
  const api = createClient<paths>({ baseUrl: base, fetch, redirect: 'manual', headers: options.headers ?? {} });
  if (!options.checked) api.use({ onResponse: async ({ request, response, schemaPath }) => checkResponse(request.method, schemaPath, response) });
  return api;
}

/** The typed client of a caller that authenticates with an API key (`Authorization: Bearer`), and no cookies. */
export function keyClient(base: string, apiKey: string): Api {
  return typedClient(base, (request) => fetch(request), { headers: { authorization: `Bearer ${apiKey}` } });
}

/**
 * A browser as far as the API can tell: it keeps cookies, sends them back, sends its `Origin`, and
 * (like the web app) echoes the CSRF cookie (`csrf_token`, or `__Host-csrf_token` with Secure
 * cookies) in `X-CSRF-Token` on state-changing requests. Tests call the API through `api`, the
 * typed client over this browser's `fetch`; every answer is checked against the document
 * (contract.ts), errors included. `fetch` itself is for what the typed client cannot send.
 */
export class Browser {
  readonly cookies = new Map<string, string>();
  readonly api: Api;
  readonly #base: string;
  /** Set to false to behave like a page that forgot the CSRF header. */
  sendCsrfHeader = true;
  origin: string | undefined = APP_ORIGIN;

  constructor(base: string) {
    this.#base = base;
    this.api = typedClient(base, (request) => this.fetch(request));
  }

  /** One request (a path of the service, or a Request) with this browser's cookies and headers; the cookies answered are kept. */
  async fetch(input: string | Request, init?: RequestInit): Promise<Response> {
    const request = typeof input === 'string' ? new Request(new URL(input, this.#base), { redirect: 'manual', ...init }) : input;
    const headers = request.headers;
    if (this.origin && !headers.has('origin')) headers.set('origin', this.origin);
    if (this.cookies.size) headers.set('cookie', [...this.cookies].map(([name, value]) => `${name}=${value}`).join('; '));
    const csrf = this.cookies.get('csrf_token') ?? this.cookies.get('__Host-csrf_token');
    if (this.sendCsrfHeader && csrf && request.method !== 'GET' && !headers.has('x-csrf-token')) headers.set('x-csrf-token', csrf);
    const response = await fetch(request);
    for (const header of response.headers.getSetCookie()) {
      const cookie = parseSetCookie(header);
      const expired = cookie.attributes.expires && new Date(String(cookie.attributes.expires)).getTime() <= Date.now();
      if (!cookie.value || expired || cookie.attributes['max-age'] === '0') this.cookies.delete(cookie.name);
      else this.cookies.set(cookie.name, cookie.value);
    }
    return response;
  }
}
