import type { Principal, Role } from '../principal.ts';
import { roleAtLeast } from '../principal.ts';
import { AppError } from '../errors.ts';
import type { OperationRules } from './operations.ts';

/**
 * What a session caller needs, stated by each operation's `x-required-role` in the spec
 * (DESIGN.md §3 Roles): a role of the caller's current organization (viewer < member < admin <
 * super_admin), or `signed-in` for routes about the user themselves, which need no organization.
 */
export type Requirement = Role | 'signed-in';

/**
 * Refuses a session caller below the operation's role with 403 `FORBIDDEN`. API keys are scoped
 * elsewhere. Fails closed: a session caller of an operation with no requirement is refused (500);
 * the binding refuses to start with such an operation (readOperationRules).
 */
export function authorize(operation: Pick<OperationRules, 'operationId' | 'requiredRole'>, principal: Principal | undefined): void {
  if (principal?.kind !== 'session') return;
  const required = operation.requiredRole;
  if (!required) throw new Error(`The operation ${operation.operationId} accepts a session but has no x-required-role`);
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
