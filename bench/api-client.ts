import { randomBytes } from 'node:crypto';
import type pg from 'pg';

/**
 * A small client of the service's management API as a browser would use it: it keeps the cookies
 * the service sets (session, csrf_token, or `__Host-` ones with Secure cookies) and echoes the CSRF
 * token in `X-CSRF-Token` on writes.
 */
export class ApiError extends Error {
  readonly status: number;
  readonly body: unknown;
  constructor(method: string, path: string, status: number, body: unknown) {
    super(`${method} ${path} answered ${status}: ${typeof body === 'string' ? body : JSON.stringify(body)}`);
    this.status = status;
    this.body = body;
  }
}

export class ApiClient {
  readonly baseUrl: string;
  readonly #cookies = new Map<string, string>();

  constructor(baseUrl: string) {
    this.baseUrl = baseUrl.replace(/\/+$/, '');
  }

  get<T>(path: string): Promise<T> {
    return this.request<T>('GET', path);
  }

  post<T>(path: string, body: unknown): Promise<T> {
    return this.request<T>('POST', path, body);
  }

  /** The headers a browser sends with a request of `method`: its cookies, and the CSRF token on writes. */
  headers(method = 'GET', withBody = false): Record<string, string> {
    const headers: Record<string, string> = { accept: 'application/json', origin: new URL(this.baseUrl).origin };
    if (withBody) headers['content-type'] = 'application/json';
    if (this.#cookies.size) headers.cookie = [...this.#cookies].map(([name, value]) => `${name}=${value}`).join('; ');
    const csrf = this.#cookies.get('__Host-csrf_token') ?? this.#cookies.get('csrf_token');
    if (csrf && method !== 'GET') headers['x-csrf-token'] = decodeURIComponent(csrf);
    return headers;
  }

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers = this.headers(method, body !== undefined);
    const response = await fetch(`${this.baseUrl}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(15_000),
    });
    for (const line of response.headers.getSetCookie()) {
      const [pair = ''] = line.split(';');
      const eq = pair.indexOf('=');
      if (eq > 0) this.#cookies.set(pair.slice(0, eq).trim(), pair.slice(eq + 1).trim());
    }
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      // Not JSON: keep the text for the error message.
    }
    if (!response.ok) throw new ApiError(method, path, response.status, parsed);
    return parsed as T;
  }
}

/**
 * A user registered through the API, owner of a new organization `organization`, signed in; the
 * email marked verified in the database (`db`) as the emailed link would (the bench reads no mail):
 * API keys need a verified email.
 */
export async function registeredUser(base: string, db: pg.Client, email: string, organization: string): Promise<ApiClient> {
  const api = new ApiClient(base);
  await api.post('/v1/user/register', { email, password: randomBytes(18).toString('base64url'), organization });
  await db.query('update users set email_verified_at = now() where email = $1', [email]);
  return api;
}
