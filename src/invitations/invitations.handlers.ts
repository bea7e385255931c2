import { clientAddress } from '../http/client-address.ts';
import { toSessionResponse } from '../accounts/session-response.ts';
import type { SessionCookies } from '../accounts/cookies.ts';
import type { Handlers } from '../http/types.ts';
import type { InvitationsService } from './invitations.service.ts';

type InvitationHandlers = Pick<
  Handlers,
  | 'listMyInvitations'
  | 'previewInvitation'
  | 'acceptInvitationByToken'
  | 'rejectInvitationByToken'
  | 'acceptInvitation'
  | 'rejectInvitation'
  | 'registerWithInvitation'
>;

export function invitationHandlers(deps: { invitations: InvitationsService; cookies: SessionCookies }): InvitationHandlers {
  const { invitations, cookies } = deps;
  return {
    listMyInvitations: async (context) => ({ status: 200, body: await invitations.listMine(context.auth) }),
    previewInvitation: async ({ params }) => ({ status: 200, body: await invitations.preview(params.token) }),
    acceptInvitationByToken: async (context) => ({
      status: 200,
      body: await invitations.respondByToken(context.auth, context.params.token, 'accept'),
    }),
    rejectInvitationByToken: async (context) => ({
      status: 200,
      body: await invitations.respondByToken(context.auth, context.params.token, 'reject'),
    }),
    acceptInvitation: async (context) => ({
      status: 200,
      body: await invitations.respondById(context.auth, context.params.invitation_id, 'accept'),
    }),
    rejectInvitation: async (context) => ({
      status: 200,
      body: await invitations.respondById(context.auth, context.params.invitation_id, 'reject'),
    }),
    registerWithInvitation: async ({ body, req, res }) => {
      const { token, principal } = await invitations.register(body, clientAddress(req));
      cookies.set(res, token, principal.sessionId, principal.expiresAt);
      return { status: 201, body: toSessionResponse(principal) };
    },
  };
}
