import type { SessionCookies } from '../accounts/cookies.ts';
import type { Handlers } from '../http/types.ts';
import type { InvitationsService } from '../invitations/invitations.service.ts';
import type { OrganizationsService } from './organizations.service.ts';

type OrganizationHandlers = Pick<
  Handlers,
  | 'getOrganization'
  | 'updateOrganization'
  | 'listMembers'
  | 'updateMemberRole'
  | 'removeMember'
  | 'createInvitation'
  | 'listInvitations'
  | 'resendInvitation'
  | 'revokeInvitation'
>;

export function organizationHandlers(deps: {
  organizations: OrganizationsService;
  invitations: InvitationsService;
  cookies: SessionCookies;
}): OrganizationHandlers {
  const { organizations, invitations, cookies } = deps;
  return {
    getOrganization: async (context) => ({ status: 200, body: await organizations.get(context.auth) }),
    updateOrganization: async (context) => ({ status: 200, body: await organizations.update(context.auth, context.body) }),
    listMembers: async (context) => ({ status: 200, body: await organizations.members(context.auth) }),
    updateMemberRole: async (context) => ({
      status: 200,
      body: await organizations.changeRole(context.auth, context.params.user_id, context.body.role),
    }),
    removeMember: async (context) => {
      const principal = context.auth;
      await organizations.removeMember(principal, context.params.user_id, { keepCredentials: context.query.keep_credentials === true });
      // Leaving ends the sessions in this organization, this one included.
      if (context.params.user_id === principal.user.id) cookies.clear(context.res);
      return { status: 204, body: undefined };
    },
    createInvitation: async (context) => ({ status: 201, body: await invitations.create(context.auth, context.body) }),
    listInvitations: async (context) => ({ status: 200, body: await invitations.list(context.auth) }),
    resendInvitation: async (context) => ({
      status: 200,
      body: await invitations.resend(context.auth, context.params.invitation_id),
    }),
    revokeInvitation: async (context) => ({
      status: 200,
      body: await invitations.revoke(context.auth, context.params.invitation_id),
    }),
  };
}
