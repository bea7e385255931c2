import type { Document } from 'openapi-backend';
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
  resendEmailVerification: 'signed-in',
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
  // Any member may leave; removing someone else needs admin (checked by the service, which knows whom).
  removeMember: 'viewer',
  updateMemberRole: 'admin',
  updateOrganization: 'admin',
  createInvitation: 'admin',
  listInvitations: 'admin',
  resendInvitation: 'admin',
  revokeInvitation: 'admin',

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

/**
 * Refuses a session caller below the operation's role with 403 `FORBIDDEN`. API keys are scoped
 * elsewhere. Fails closed: a session caller of an operation with no requirement is refused (500),
 * and the binding refuses to start with such an operation (assertEverySessionOperationHasARole).
 */
export function authorize(operationId: OperationId, principal: Principal | undefined): void {
  if (principal?.kind !== 'session') return;
  const required = requirementOf(operationId);
  if (!required) throw new Error(`The operation ${operationId} accepts a session but has no role in REQUIRED_ROLE`);
  if (required === 'signed-in') return;
  if (!principal.organization) {
    throw new AppError('FORBIDDEN', 'You have no organization yet: complete your profile (PATCH /v1/user/profile with `organization`).');
  }
  if (!roleAtLeast(principal.role, required)) {
    throw new AppError('FORBIDDEN', `This needs the role ${required} or higher in ${principal.organization.name}; yours is ${principal.role}.`, {
      inference: { code: 'insufficient_role' },
    });
  }
}

/** Throws at start-up when an operation of the document accepts the session cookie but has no role here. */
export function assertEverySessionOperationHasARole(document: Document): void {
  const missing: string[] = [];
  for (const pathItem of Object.values(document.paths ?? {})) {
    for (const operation of Object.values(pathItem ?? {}) as Array<{ operationId?: string; security?: Array<Record<string, unknown>> }>) {
      if (!operation || typeof operation !== 'object' || !operation.operationId) continue;
      const schemes = (operation.security ?? document.security ?? []).flatMap((requirement) => Object.keys(requirement));
      if (schemes.includes('SessionCookie') && !requirementOf(operation.operationId as OperationId)) missing.push(operation.operationId);
    }
  }
  if (missing.length) {
    throw new Error(`Operations that accept the session cookie need a role in REQUIRED_ROLE (src/http/authorization.ts): ${missing.join(', ')}.`);
  }
}

function requirementOf(operationId: OperationId): Requirement | undefined {
  return Object.hasOwn(REQUIRED_ROLE, operationId) ? (REQUIRED_ROLE as Partial<Record<OperationId, Requirement>>)[operationId] : undefined;
}
