import type { Response } from 'express';
import type { Config } from '../config.ts';
import type { Keyring } from '../crypto.ts';

export const CSRF_HEADER = 'x-csrf-token';

/**
 * The two cookies of a session: the HttpOnly session token, and the readable `csrf_token` that the
 * client echoes in `X-CSRF-Token`. The CSRF token is an HMAC of the session id, so it is bound to
 * the session without being stored. With Secure cookies both names carry the `__Host-` prefix
 * (`__Host-session`, `__Host-csrf_token`; see config.ts).
 */
export class SessionCookies {
  readonly #config: Config['session'];
  readonly #keyring: Keyring;

  constructor(config: Config['session'], keyring: Keyring) {
    this.#config = config;
    this.#keyring = keyring;
  }

  get name(): string {
    return this.#config.cookieName;
  }

  get csrfName(): string {
    return this.#config.csrfCookieName;
  }

  csrfToken(sessionId: string): string {
    return this.#keyring.sign('csrf', sessionId);
  }

  set(res: Response, token: string, sessionId: string, expiresAt: Date): void {
    const common = { secure: this.#config.secure, sameSite: this.#config.sameSite, path: '/', expires: expiresAt } as const;
    res.cookie(this.#config.cookieName, token, { ...common, httpOnly: true });
    res.cookie(this.#config.csrfCookieName, this.csrfToken(sessionId), { ...common, httpOnly: false });
  }

  clear(res: Response): void {
    const common = { secure: this.#config.secure, sameSite: this.#config.sameSite, path: '/' } as const;
    res.clearCookie(this.#config.cookieName, { ...common, httpOnly: true });
    res.clearCookie(this.#config.csrfCookieName, { ...common, httpOnly: false });
  }
}
