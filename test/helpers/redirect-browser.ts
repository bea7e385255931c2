import { parseSetCookie, typedClient, type Api } from './browser.ts';
import { checkResponse, templateOf } from './contract.ts';

interface StoredCookie {
  host: string;
  name: string;
  value: string;
  path: string;
}

export interface Navigation {
  /** The last response: not a redirect, or a redirect the browser did not follow. */
  response: Response;
  /** Every URL requested, in order (as requested, after rewriting). */
  visited: string[];
  /** The `Location` of the last response, resolved, before rewriting; undefined when it is no redirect. */
  location: string | undefined;
}

export interface NavigateOptions {
  /** Stop before requesting a URL for which this is true (checked on the URL before rewriting). */
  stopBefore?: (url: URL) => boolean;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/**
 * A browser that navigates across sites the way a real one does for a redirect-based sign-in:
 * cookies kept per host and path, redirects followed one by one (manually, so each hop can be
 * inspected), and only to loopback hosts; a redirect anywhere else (the web app) ends the
 * navigation. `rewrites` maps an origin the service names in its URLs (its `PUBLIC_URL`) to where
 * it really listens.
 */
export class RedirectBrowser {
  readonly #cookies: StoredCookie[] = [];
  readonly #rewrites: Map<string, string>;

  constructor(rewrites: Record<string, string> = {}) {
    this.#rewrites = new Map(Object.entries(rewrites).map(([from, to]) => [new URL(from).origin, new URL(to).origin]));
  }

  /** Follows redirects from `url` while they lead to loopback hosts. */
  async navigate(url: string, options: NavigateOptions = {}): Promise<Navigation> {
    const visited: string[] = [];
    let next = new URL(url);
    for (let hop = 0; hop < 20; hop++) {
      const target = this.#rewrite(next);
      visited.push(target.href);
      const response = await this.request('GET', target.href);
      const header = response.headers.get('location');
      if (!REDIRECTS.has(response.status) || !header) return { response, visited, location: undefined };
      const location = new URL(header, target);
      if (!isLoopback(this.#rewrite(location)) || options.stopBefore?.(location)) {
        return { response, visited, location: location.href };
      }
      next = location;
    }
    throw new Error(`too many redirects from ${url}`);
  }

  /**
   * One request with this browser's cookies; the cookies it sets are kept. No redirect is followed.
   * An answer of the service (an origin it rewrites) is checked against the document, as the typed
   * client's are.
   */
  async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const target = this.#rewrite(url);
    const headers = new Headers(request.headers);
    const cookie = this.#cookiesFor(target)
      .map((c) => `${c.name}=${c.value}`)
      .join('; ');
    if (cookie) headers.set('cookie', cookie);
    const body = request.body ? await request.arrayBuffer() : undefined;
    const response = await fetch(target, { method: request.method, headers, body, redirect: 'manual' });
    for (const header of response.headers.getSetCookie()) this.#store(target, header);
    const template = this.#rewrites.has(url.origin) ? templateOf(url.pathname) : undefined;
    if (template) await checkResponse(request.method, template, response);
    return response;
  }

  /** One request by method and URL, with a JSON `body` if given (see `fetch`). */
  async request(method: string, url: string, options: { headers?: Record<string, string>; body?: unknown } = {}): Promise<Response> {
    const headers: Record<string, string> = { ...options.headers };
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    return this.fetch(new Request(url, { method, headers, body: options.body === undefined ? undefined : JSON.stringify(options.body) }));
  }

  /** The service's typed client through this browser, addressed at `origin` (a URL the service names itself by). */
  api(origin: string): Api {
    return typedClient(origin, (request) => this.fetch(request), { checked: true });
  }

  /** The value of cookie `name` that a request to `url` would carry. */
  cookie(url: string, name: string): string | undefined {
    return this.#cookiesFor(this.#rewrite(new URL(url))).find((c) => c.name === name)?.value;
  }

  /** Sets (or, with undefined, removes) a cookie for `url`'s host, as if a response had set it. */
  setCookie(url: string, name: string, value: string | undefined, path = '/'): void {
    const host = this.#rewrite(new URL(url)).host;
    const index = this.#cookies.findIndex((c) => c.host === host && c.name === name && c.path === path);
    if (index >= 0) this.#cookies.splice(index, 1);
    if (value !== undefined) this.#cookies.push({ host, name, value, path });
  }

  #rewrite(url: URL): URL {
    const origin = this.#rewrites.get(url.origin);
    return origin ? new URL(`${url.pathname}${url.search}`, origin) : url;
  }

  #cookiesFor(url: URL): StoredCookie[] {
    return this.#cookies.filter((c) => c.host === url.host && pathMatches(url.pathname, c.path));
  }

  #store(url: URL, header: string): void {
    const cookie = parseSetCookie(header);
    const path = typeof cookie.attributes.path === 'string' ? cookie.attributes.path : defaultPath(url.pathname);
    const expires = cookie.attributes.expires;
    const expired =
      cookie.attributes['max-age'] === '0' ||
      (typeof expires === 'string' && new Date(expires).getTime() <= Date.now()) ||
      Number(cookie.attributes['max-age']) < 0;
    this.setCookie(url.href, cookie.name, expired ? undefined : cookie.value, path);
  }
}

function isLoopback(url: URL): boolean {
  return ['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname);
}

/** RFC 6265 §5.1.4. */
function pathMatches(requestPath: string, cookiePath: string): boolean {
  if (requestPath === cookiePath) return true;
  if (!requestPath.startsWith(cookiePath)) return false;
  return cookiePath.endsWith('/') || requestPath.charAt(cookiePath.length) === '/';
}

function defaultPath(requestPath: string): string {
  const slash = requestPath.lastIndexOf('/');
  return slash > 0 ? requestPath.slice(0, slash) : '/';
}
