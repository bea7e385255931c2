import { billingHandlers } from './billing/billing.handlers.ts';
import { accountHandlers } from './accounts/accounts.handlers.ts';
import { sessionHandlers } from './accounts/sessions.handlers.ts';
import { ssoHandlers } from './accounts/sso.handlers.ts';
import type { Container } from './container.ts';
import { apiKeyHandlers } from './api-keys/api-keys.handlers.ts';
import { spendingLimitHandlers } from './billing/spending-limit.handlers.ts';
import { catalogHandlers } from './catalog/catalog.handlers.ts';
import { inferenceHandlers } from './inference/inference.handlers.ts';
import { deploymentHandlers } from './deployments/deployments.handlers.ts';
import { invitationHandlers } from './invitations/invitations.handlers.ts';
import { organizationHandlers } from './organizations/organizations.handlers.ts';
import { platformHandlers } from './platform/platform.handlers.ts';
import { eventHandlers } from './events/events.handlers.ts';
import { webhookHandlers } from './webhooks/webhooks.handlers.ts';
import type { Handlers } from './http/types.ts';

/**
 * The one handler map of the service, keyed by operationId. A route of the document without an
 * entry here fails type-checking and start-up; an operation not built yet answers 501.
 */
export function buildHandlers(c: Container): Handlers {
  return {
    ...platformHandlers(c),
    ...accountHandlers(c),
    ...sessionHandlers(c),
    ...ssoHandlers(c),
    ...organizationHandlers(c),
    ...invitationHandlers(c),
    ...catalogHandlers(c),
    ...deploymentHandlers(c),
    ...apiKeyHandlers(c),
    ...inferenceHandlers(c),
    ...billingHandlers(c),
    ...spendingLimitHandlers(c),
    ...eventHandlers(c),
    ...webhookHandlers(c),
  };
}
