import { APP_ORIGIN } from './app.ts';

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

/**
 * A browser as far as the API can tell: it keeps cookies, sends them back, sends its `Origin`, and
 * (like the web app) echoes the `csrf_token` cookie in `X-CSRF-Token` on state-changing requests.
 */
export class Browser {
  readonly cookies = new Map<string, string>();
  readonly #base: string;
  /** Set to false to behave like a page that forgot the CSRF header. */
  sendCsrfHeader = true;
  origin: string | undefined = APP_ORIGIN;

  constructor(base: string) {
    this.#base = base;
  }

  async request(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Response> {
    const all: Record<string, string> = { ...headers };
    if (this.origin) all.origin = this.origin;
    if (this.cookies.size) all.cookie = [...this.cookies].map(([name, value]) => `${name}=${value}`).join('; ');
    const csrf = this.cookies.get('csrf_token') ?? this.cookies.get('__Host-csrf_token');
    if (this.sendCsrfHeader && csrf && method !== 'GET' && !('x-csrf-token' in all)) all['x-csrf-token'] = csrf;
    if (body !== undefined) all['content-type'] = 'application/json';
    const response = await fetch(`${this.#base}${path}`, {
      method,
      headers: all,
      body: body === undefined ? undefined : JSON.stringify(body),
      redirect: 'manual',
    });
    for (const header of response.headers.getSetCookie()) {
      const cookie = parseSetCookie(header);
      const expired = cookie.attributes.expires && new Date(String(cookie.attributes.expires)).getTime() <= Date.now();
      if (!cookie.value || expired || cookie.attributes['max-age'] === '0') this.cookies.delete(cookie.name);
      else this.cookies.set(cookie.name, cookie.value);
    }
    return response;
  }

  get(path: string, headers?: Record<string, string>) {
    return this.request('GET', path, undefined, headers);
  }

  post(path: string, body?: unknown, headers?: Record<string, string>) {
    return this.request('POST', path, body, headers);
  }

  patch(path: string, body?: unknown, headers?: Record<string, string>) {
    return this.request('PATCH', path, body, headers);
  }

  delete(path: string, headers?: Record<string, string>) {
    return this.request('DELETE', path, undefined, headers);
  }
}
