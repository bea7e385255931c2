import type { components } from '../generated/api.d.ts';
import { AppError } from './errors.ts';

/**
 * Who calls: the caller types and roles every layer reads (the HTTP binding, the areas, the
 * gateway). It imports no area, so that any of them may import it.
 */
export type Role = components['schemas']['Role'];

/** Least to most privileged; a role includes every right of the roles before it. */
export const ROLES: readonly Role[] = ['viewer', 'member', 'admin', 'super_admin'];

export function roleId(role: Role): number {
  return ROLES.indexOf(role) + 1;
}

export function roleAtLeast(role: Role | null, minimum: Role): boolean {
  return role !== null && ROLES.indexOf(role) >= ROLES.indexOf(minimum);
}

/** A caller signed in with the session cookie. */
export interface SessionPrincipal {
  kind: 'session';
  sessionId: string;
  expiresAt: Date;
  /** Sign-in time: the session ends 90 days after it, however often it is used. */
  createdAt: Date;
  authMethod: string;
  /** `emailVerified`: the user proved they own `email` (DESIGN.md §3 Email ownership). */
  user: { id: number; email: string; name: string; emailVerified: boolean };
  /** The session's current organization and the caller's role in it; null before a profile is complete. */
  organization: { id: number; name: string } | null;
  role: Role | null;
}

/** A caller holding an API key: it reaches only the deployments of its scope. */
export interface ApiKeyPrincipal {
  kind: 'apiKey';
  keyId: number;
  organizationId: number;
  deploymentIds: ReadonlySet<string>;
  /** The key may call hosted models too (`allow_hosted_models`). */
  allowHostedModels: boolean;
  /** Its limits on the inference routes (its own over its organization's defaults); undefined when none applies. */
  limits?: EffectiveLimits;
}

/**
 * What limits an API key on the inference routes: its own, each falling back on its organization's
 * default; undefined when nothing limits it (and the proxy does no limit work for it at all).
 */
export interface EffectiveLimits {
  requestsPerMinute: number | null;
  tokensPerMinute: number | null;
  monthlyTokens: number | null;
  /** Millionths of a dollar. */
  monthlySpendMicros: number | null;
}

export type Principal = SessionPrincipal | ApiKeyPrincipal;

/**
 * 403 `EMAIL_NOT_VERIFIED` until the caller proved their address: an account nobody proved makes
 * nothing that outlives it (API keys, invitations, webhook endpoints) and calls no hosted model.
 */
export function requireVerifiedEmail(principal: SessionPrincipal, what: string): void {
  if (!principal.user.emailVerified) {
    throw new AppError('EMAIL_NOT_VERIFIED', `Verify your email first (open the link we emailed you) to ${what}.`, {
      inference: { code: 'insufficient_role' },
    });
  }
}

/** The caller's current organization; 403 before they have one (a profile not yet complete). */
export function requireOrganization(principal: SessionPrincipal): { id: number; name: string } {
  if (!principal.organization) throw new AppError('FORBIDDEN', 'You have no organization yet: complete your profile first.');
  return principal.organization;
}
