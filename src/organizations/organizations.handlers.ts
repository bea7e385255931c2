import { sessionOf } from '../accounts/accounts.handlers.ts';
import type { Handlers } from '../http/types.ts';
import type { InvitationsService } from '../invitations/invitations.service.ts';
import type { OrganizationsService } from './organizations.service.ts';

type OrganizationHandlers = Pick<
  Handlers,
  'getOrganization' | 'updateOrganization' | 'listMembers' | 'createInvitation' | 'listInvitations' | 'resendInvitation'
>;

export function organizationHandlers(deps: { organizations: OrganizationsService; invitations: InvitationsService }): OrganizationHandlers {
  const { organizations, invitations } = deps;
  return {
    getOrganization: async (context) => ({ status: 200, body: await organizations.get(sessionOf(context)) }),
    updateOrganization: async (context) => ({ status: 200, body: await organizations.update(sessionOf(context), context.body) }),
    listMembers: async (context) => ({ status: 200, body: await organizations.members(sessionOf(context)) }),
    createInvitation: async (context) => ({ status: 201, body: await invitations.create(sessionOf(context), context.body) }),
    listInvitations: async (context) => ({ status: 200, body: await invitations.list(sessionOf(context)) }),
    resendInvitation: async (context) => ({
      status: 200,
      body: await invitations.resend(sessionOf(context), context.params.invitation_id),
    }),
  };
}
