import type { Request } from 'express';
import { AppError } from '../errors.ts';
import type { HandlerContext, Handlers, OperationId } from '../http/types.ts';
import type { AccountsService } from './accounts.service.ts';
import type { SessionCookies } from './cookies.ts';
import type { EmailVerificationService } from './email-verification.service.ts';
import type { PasswordResetService } from './password-reset.service.ts';
import type { SessionPrincipal } from './principal.ts';
import { toSessionResponse } from './session-response.ts';

type AccountHandlers = Pick<
  Handlers,
  | 'registerUser'
  | 'signIn'
  | 'getSession'
  | 'updateProfile'
  | 'logOut'
  | 'requestPasswordReset'
  | 'confirmPasswordReset'
  | 'confirmEmailVerification'
  | 'resendEmailVerification'
>;

/** The signed-in caller of a session route (the security handler has already checked it). */
export function sessionOf(context: HandlerContext<OperationId>): SessionPrincipal {
  if (context.auth?.kind !== 'session') throw new AppError('UNAUTHENTICATED', 'Sign in to use this route.');
  return context.auth;
}

/** The client's address for per-address limits (behind a proxy, as `TRUST_PROXY` allows). */
export function clientAddress(req: Request): string {
  return req.ip ?? req.socket.remoteAddress ?? 'unknown';
}

export function accountHandlers(deps: {
  accounts: AccountsService;
  passwordReset: PasswordResetService;
  emailVerification: EmailVerificationService;
  cookies: SessionCookies;
}): AccountHandlers {
  const { accounts, passwordReset, emailVerification, cookies } = deps;
  return {
    registerUser: async ({ body, req, res }) => {
      const { token, principal } = await accounts.register(body, clientAddress(req));
      cookies.set(res, token, principal.sessionId, principal.expiresAt);
      return { status: 201, body: toSessionResponse(principal) };
    },
    signIn: async ({ body, req, res }) => {
      const { token, principal } = await accounts.signIn(body, clientAddress(req));
      cookies.set(res, token, principal.sessionId, principal.expiresAt);
      return { status: 200, body: toSessionResponse(principal) };
    },
    getSession: (context) => ({ status: 200, body: toSessionResponse(sessionOf(context)) }),
    updateProfile: async (context) => {
      const principal = await accounts.updateProfile(sessionOf(context), context.body);
      return { status: 200, body: toSessionResponse(principal) };
    },
    logOut: async (context) => {
      await accounts.logOut(sessionOf(context));
      cookies.clear(context.res);
      return { status: 200, body: { authenticated: false } };
    },
    requestPasswordReset: async ({ body, req }) => {
      await passwordReset.request(body.email, clientAddress(req));
      return { status: 200, body: { accepted: true } };
    },
    confirmPasswordReset: async ({ body, req }) => {
      await passwordReset.confirm(body.token, body.password, clientAddress(req));
      return { status: 200, body: { reset: true } };
    },
    confirmEmailVerification: async ({ body }) => {
      const { email } = await emailVerification.confirm(body.token);
      return { status: 200, body: { verified: true, email } };
    },
    resendEmailVerification: async (context) => {
      await emailVerification.resend(sessionOf(context), clientAddress(context.req));
      return { status: 200, body: { queued: true } };
    },
  };
}
