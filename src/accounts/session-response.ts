import type { components } from '../../generated/api.d.ts';
import { roleId, type SessionPrincipal } from '../principal.ts';

export type SessionResponse = components['schemas']['SessionResponse'];

/** The Session response of the interface, for a signed-in principal. */
export function toSessionResponse(principal: SessionPrincipal): SessionResponse {
  const role = principal.role ?? 'viewer';
  return {
    authenticated: true,
    user: {
      id: principal.user.id,
      email: principal.user.email,
      name: principal.user.name,
      organization: principal.organization?.name ?? '',
      role: { id: roleId(role), name: role },
      requires_profile_completion: principal.organization === null,
      email_verified: principal.user.emailVerified,
    },
    session: { expires_at: principal.expiresAt.toISOString(), auth_method: principal.authMethod },
  };
}
