import type { Principal, Role } from '../accounts/principal.ts';
import { roleAtLeast } from '../accounts/principal.ts';
import { AppError } from '../errors.ts';
import type { OperationId } from './types.ts';

/**
 * Who may call each operation that needs a session, in one place (DESIGN.md §3 Roles):
 * a role of the caller's current organization (viewer < member < admin < super_admin), or
 * `signed-in` for routes about the user themselves, which need no organization.
 */
export type Requirement = Role | 'signed-in';

export const REQUIRED_ROLE = {
  getSession: 'signed-in',
  updateProfile: 'signed-in',
  logOut: 'signed-in',
  listSessions: 'signed-in',
  revokeSession: 'signed-in',
  revokeOtherSessions: 'signed-in',
  listMyInvitations: 'signed-in',
  acceptInvitationByToken: 'signed-in',
  rejectInvitationByToken: 'signed-in',
  acceptInvitation: 'signed-in',
  rejectInvitation: 'signed-in',

  getOrganization: 'viewer',
  listMembers: 'viewer',
  updateOrganization: 'admin',
  createInvitation: 'admin',
  listInvitations: 'admin',
  resendInvitation: 'admin',

  listDeployableModels: 'viewer',
  getDeployableModel: 'viewer',
  listDeployments: 'viewer',
  getDeployment: 'viewer',
  createDeployment: 'member',
  deleteDeployment: 'member',

  listApiKeys: 'admin',
  createApiKey: 'admin',
  listApiKeyDeploymentOptions: 'admin',
  updateApiKey: 'admin',
  revokeApiKey: 'admin',

  createChatCompletion: 'member',
  createEmbedding: 'member',
  createRerank: 'member',
  createTranscription: 'member',
  createImage: 'member',
  listModels: 'member',

  getBillingConfig: 'viewer',
  getBillingAccount: 'admin',
  getUsageSummary: 'admin',
  getSubscription: 'admin',
  activatePostpaidSubscription: 'admin',
  updateCollectionMethod: 'admin',
  listPaymentMethods: 'admin',
  setDefaultPaymentMethod: 'admin',
  detachPaymentMethod: 'admin',
  createBillingPortalSession: 'admin',
  createCheckoutSetupSession: 'admin',
  listInvoices: 'admin',
} as const satisfies Partial<Record<OperationId, Requirement>>;

/** Refuses a session caller below the operation's role with 403 `FORBIDDEN`. API keys are scoped elsewhere. */
export function authorize(operationId: OperationId, principal: Principal | undefined): void {
  const required: Requirement | undefined = (REQUIRED_ROLE as Partial<Record<OperationId, Requirement>>)[operationId];
  if (!required || required === 'signed-in' || principal?.kind !== 'session') return;
  if (!principal.organization) {
    throw new AppError('FORBIDDEN', 'You have no organization yet: complete your profile (PATCH /v1/user/profile with `organization`).');
  }
  if (!roleAtLeast(principal.role, required)) {
    throw new AppError('FORBIDDEN', `This needs the role ${required} or higher in ${principal.organization.name}; yours is ${principal.role}.`, {
      inference: { code: 'insufficient_role' },
    });
  }
}
