import type { NextFunction, Request, Response } from 'express';
import type { Context } from 'openapi-backend';
import { CSRF_HEADER, type SessionCookies } from '../accounts/cookies.ts';
import type { ApiKeyPrincipal, SessionPrincipal } from '../accounts/principal.ts';
import type { ApiKeysService } from '../api-keys/api-keys.service.ts';
import type { SessionStore } from '../accounts/sessions.ts';
import { constantTimeEqual } from '../crypto.ts';
import { AppError } from '../errors.ts';
import { clientAddress } from './client-address.ts';
import type { SecurityHandlers } from './openapi.ts';

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Refuses a state-changing request whose `Origin` is not allowed, unless it carries a bearer API
 * key (no ambient credential) or its operation is `x-csrf-exempt` (the payment processor's webhook,
 * verified by signature). Runs after the binding's route middleware (`req.operation`).
 */
export function originCheck(allowedOrigins: readonly string[]) {
  const allowed = new Set(allowedOrigins);
  return function originCheckMiddleware(req: Request, _res: Response, next: NextFunction) {
    const origin = req.get('origin');
    if (!origin || SAFE_METHODS.has(req.method) || req.get('authorization') || req.operation?.csrfExempt) return next();
    if (allowed.has(origin)) return next();
    next(new AppError('CSRF_FAILED', `Requests from the origin ${origin} are not allowed.`));
  };
}

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

/** Authentication by `Authorization: Bearer svc-sk-…`, accepted on inference routes only. */
export function apiKeyAuthentication(deps: { apiKeys: ApiKeysService }): SecurityHandlers['ApiKeyBearer'] {
  return async (_context: Context, req: Request): Promise<ApiKeyPrincipal> => {
    const header = req.get('authorization');
    if (!header) throw new AppError('UNAUTHENTICATED', 'Send an API key as Authorization: Bearer svc-sk-…', { inference: { code: 'missing_credentials' } });
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match?.[1]) {
      throw new AppError('UNAUTHENTICATED', 'Send the API key as Authorization: Bearer svc-sk-…', { inference: { code: 'invalid_api_key' } });
    }
    return deps.apiKeys.authenticate(match[1], clientAddress(req));
  };
}
