import type { Response } from 'express';
import type { Config } from '../config.ts';
import { isAppError } from '../errors.ts';
import type { Handlers } from '../http/types.ts';
import type { InvitationsService } from '../invitations/invitations.service.ts';
import type { SessionCookies } from './cookies.ts';
import { SSO_STATE_MAX_AGE_SECONDS, type SsoService } from './sso.service.ts';

type SsoHandlers = Pick<Handlers, 'listSsoProviders' | 'startSsoLogin' | 'completeSsoLogin' | 'startInvitationSso'>;

export const SSO_STATE_COOKIE = 'sso_state';

/**
 * The `sso_state` cookie: the sealed state of one sign-in attempt, HttpOnly, `SameSite=Lax` (it
 * must come back on the provider's top-level redirect), only sent to `/v1/sso`, for 10 minutes.
 */
export class SsoStateCookie {
  readonly #secure: boolean;

  constructor(secure: boolean) {
    this.#secure = secure;
  }

  set(res: Response, sealedState: string): void {
    res.cookie(SSO_STATE_COOKIE, sealedState, { ...this.#attributes(), maxAge: SSO_STATE_MAX_AGE_SECONDS * 1000 });
  }

  clear(res: Response): void {
    res.clearCookie(SSO_STATE_COOKIE, this.#attributes());
  }

  #attributes() {
    return { httpOnly: true, sameSite: 'lax', secure: this.#secure, path: '/v1/sso' } as const;
  }
}

export function ssoHandlers(deps: {
  sso: SsoService;
  invitations: InvitationsService;
  cookies: SessionCookies;
  config: Pick<Config, 'session' | 'webAppUrl'>;
}): SsoHandlers {
  const { sso, invitations, cookies, config } = deps;
  const stateCookie = new SsoStateCookie(config.session.secure);
  return {
    listSsoProviders: () => ({ status: 200, body: sso.listProviders() }),
    startSsoLogin: async ({ params, query, res }) => {
      const { authorizationUrl, sealedState } = await sso.begin({ provider: params.provider, returnTo: query.return_to });
      stateCookie.set(res, sealedState);
      return { status: 302, body: undefined, headers: { Location: authorizationUrl } };
    },
    completeSsoLogin: async ({ params, query, cookies: sent, res, log }) => {
      // The attempt is used up whatever happens next.
      stateCookie.clear(res);
      const signedIn = await sso.complete({
        provider: params.provider,
        code: query.code,
        state: query.state,
        iss: query.iss,
        error: query.error,
        sealedState: sent[SSO_STATE_COOKIE],
        // SameSite=Lax: the session cookie comes along on the provider's top-level redirect.
        sessionToken: sent[cookies.name],
      });
      const { token, principal } = signedIn;
      cookies.set(res, token, principal.sessionId, principal.expiresAt);
      log.info({ user_id: principal.user.id, sso: signedIn.outcome }, 'signed in with SSO');
      const landing = new URL(`${config.webAppUrl}${signedIn.returnTo}`);
      if (signedIn.invitationToken) {
        // Signed in either way; the invitation is accepted only for the invitee's verified email.
        try {
          await invitations.respondByToken(principal, signedIn.invitationToken, 'accept');
          landing.searchParams.set('invitation', 'accepted');
        } catch (error) {
          if (!isAppError(error)) throw error;
          landing.searchParams.set('invitation_error', error.code);
        }
      }
      return { status: 302, body: undefined, headers: { Location: landing.href } };
    },
    startInvitationSso: async ({ params, body, res }) => {
      await invitations.assertOpen(body.token);
      const { authorizationUrl, sealedState } = await sso.begin({ provider: params.provider, returnTo: '/', invitationToken: body.token });
      stateCookie.set(res, sealedState);
      return { status: 200, body: { authorization_url: authorizationUrl } };
    },
  };
}
