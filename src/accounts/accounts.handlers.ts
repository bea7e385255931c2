import { clientAddress } from '../http/client-address.ts';
import type { Handlers } from '../http/types.ts';
import type { AccountsService } from './accounts.service.ts';
import type { SessionCookies } from './cookies.ts';
import type { EmailVerificationService } from './email-verification.service.ts';
import type { PasswordResetService } from './password-reset.service.ts';
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
    getSession: (context) => ({ status: 200, body: toSessionResponse(context.auth) }),
    updateProfile: async (context) => {
      const principal = await accounts.updateProfile(context.auth, context.body);
      return { status: 200, body: toSessionResponse(principal) };
    },
    logOut: async (context) => {
      await accounts.logOut(context.auth);
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
    confirmEmailVerification: async ({ body, req }) => {
      const { email } = await emailVerification.confirm(body.token, clientAddress(req));
      return { status: 200, body: { verified: true, email } };
    },
    resendEmailVerification: async (context) => {
      await emailVerification.resend(context.auth, clientAddress(context.req));
      return { status: 200, body: { queued: true } };
    },
  };
}
