import type { Request, Response } from 'express';
import type { Context } from 'openapi-backend';
import { constantTimeEqual } from '../crypto.ts';
import { AppError } from '../errors.ts';
import type { SecurityHandlers } from '../http/openapi.ts';
import type { SessionPrincipal } from '../principal.ts';
import { CSRF_HEADER, type SessionCookies } from './cookies.ts';
import type { SessionStore } from './sessions.ts';

/**
 * Authentication by session cookie, and the CSRF token that goes with it on state-changing routes.
 * Management routes refuse `Authorization` headers. The document requires the `CsrfToken` scheme
 * together with `SessionCookie` wherever a session may change state: its handler checks that
 * `X-CSRF-Token` echoes the `csrf_token` cookie and is the token bound to this session (403
 * `CSRF_FAILED` otherwise). Both handlers share one validation of the session per request. A
 * session extended by this request gets its cookies again.
 */
export function sessionSecurity(deps: { sessions: SessionStore; cookies: SessionCookies }): Pick<SecurityHandlers, 'SessionCookie' | 'CsrfToken'> {
  const session = (context: Context, req: Request, res: Response): Promise<SessionPrincipal | undefined> =>
    (req.sessionValidation ??= validateSession(deps, context, req, res));
  return {
    SessionCookie: session,
    CsrfToken: async (context: Context, req: Request, res: Response): Promise<SessionPrincipal | undefined> => {
      const principal = await session(context, req, res);
      // An API key was sent where one is accepted: that requirement decides, not this one.
      if (!principal) return undefined;
      const header = req.get(CSRF_HEADER) ?? '';
      const cookie = String(context.request.cookies?.[deps.cookies.csrfName] ?? '');
      const expected = deps.cookies.csrfToken(principal.sessionId);
      if (!header || !constantTimeEqual(header, cookie) || !constantTimeEqual(header, expected)) {
        throw new AppError('CSRF_FAILED', `Send the ${deps.cookies.csrfName} cookie value in the X-CSRF-Token header.`);
      }
      return principal;
    },
  };
}

async function validateSession(
  deps: { sessions: SessionStore; cookies: SessionCookies },
  context: Context,
  req: Request,
  res: Response,
): Promise<SessionPrincipal | undefined> {
  const keyAccepted = (context.operation.security ?? []).some((requirement) => 'ApiKeyBearer' in requirement);
  if (req.headers.authorization) {
    if (!keyAccepted) {
      throw new AppError('AUTHORIZATION_HEADER_NOT_ALLOWED', 'This route authenticates with the session cookie; remove the Authorization header.');
    }
    // Where an API key is accepted and sent, it wins and the cookie is ignored (no error to build:
    // this is every API-key request).
    return undefined;
  }
  const token = context.request.cookies?.[deps.cookies.name];
  if (typeof token !== 'string' || !token) {
    throw new AppError('UNAUTHENTICATED', 'Sign in, or send an API key, to use this route.', { inference: { code: 'missing_credentials' } });
  }
  const validated = await deps.sessions.validate(token);
  if (!validated) {
    throw new AppError('UNAUTHENTICATED', 'Your session has expired or ended. Sign in again.', { inference: { code: 'invalid_session' } });
  }
  const { principal, renewed } = validated;
  if (renewed) deps.cookies.set(res, token, principal.sessionId, principal.expiresAt);
  return principal;
}
