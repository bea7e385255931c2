import { AppError } from '../errors.ts';
import type { Handlers } from '../http/types.ts';
import type { SessionCookies } from './cookies.ts';
import type { SessionStore } from './sessions.ts';

type SessionHandlers = Pick<Handlers, 'listSessions' | 'revokeSession' | 'revokeOtherSessions'>;

/** The signed-in user's own sessions: list them, end one, end all but the current one. */
export function sessionHandlers(deps: { sessions: SessionStore; cookies: SessionCookies }): SessionHandlers {
  const { sessions, cookies } = deps;
  return {
    listSessions: async (context) => {
      const principal = context.auth;
      const list = await sessions.listOfUser(principal.user.id, principal.sessionId);
      return {
        status: 200,
        body: list.map((session) => ({
          id: session.publicId,
          created_at: session.createdAt.toISOString(),
          expires_at: session.expiresAt.toISOString(),
          auth_method: session.authMethod,
          current: session.current,
        })),
      };
    },
    revokeSession: async (context) => {
      const principal = context.auth;
      const ended = await sessions.invalidateOfUser(principal.user.id, context.params.session_id);
      if (!ended) throw new AppError('NOT_FOUND', `You have no session ${context.params.session_id}.`);
      if (ended === principal.sessionId) cookies.clear(context.res);
      return { status: 204, body: undefined };
    },
    revokeOtherSessions: async (context) => {
      const principal = context.auth;
      return { status: 200, body: { revoked: await sessions.invalidateOthersOfUser(principal.user.id, principal.sessionId) } };
    },
  };
}
