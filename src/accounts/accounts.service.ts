import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import { AppError } from '../errors.ts';
import { createOrganizationWithOwner } from '../organizations/organizations.repository.ts';
import type { RateLimiter } from '../rate-limit/rate-limiter.ts';
import { SignInThrottle } from '../rate-limit/sign-in-throttle.ts';
import type { EmailVerificationService } from './email-verification.service.ts';
import { assertNewPassword, hashPassword, verifyPassword } from './passwords.ts';
import { roleId, type SessionPrincipal } from './principal.ts';
import type { NewSession, SessionStore } from './sessions.ts';

type RegisterRequest = components['schemas']['RegisterRequest'];
type SignInRequest = components['schemas']['SignInRequest'];
type UpdateProfileRequest = components['schemas']['UpdateProfileRequest'];
export type SessionResponse = components['schemas']['SessionResponse'];

const FIFTEEN_MINUTES = 15 * 60;
/** Registrations one client address may attempt in 15 minutes: room for an office behind one NAT, bounded argon2 work for a flood. */
const REGISTRATIONS_PER_ADDRESS = 100;

/** Emails are compared case-insensitively and stored trimmed and lower-cased. */
export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase();
}

/** `name`, else first and last name, else the part of the email before `@`. */
export function displayName(input: { name?: string | null; first_name?: string | null; last_name?: string | null }, email: string): string {
  const given = input.name?.trim();
  if (given) return given;
  const joined = [input.first_name, input.last_name].map((part) => part?.trim()).filter(Boolean).join(' ');
  return joined || email.split('@')[0] || email;
}

export function notBlank(value: string, location: string): string {
  const trimmed = value.trim();
  if (!trimmed) {
    throw new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', { errors: [{ location, message: 'must not be blank' }] });
  }
  return trimmed;
}

export function isUniqueViolation(error: unknown, constraint: string): boolean {
  const pg = error as { code?: string; constraint?: string };
  return pg.code === '23505' && pg.constraint === constraint;
}

interface ProfileFields {
  name?: string | null;
  first_name?: string | null;
  last_name?: string | null;
  country?: string | null;
  contact_number?: string | null;
}

/** Inserts a user who signs in with a password; a taken email fails on `users_email_unique`. */
export async function insertPasswordUser(trx: Knex.Transaction, email: string, passwordHash: string, profile: ProfileFields): Promise<number> {
  const [user] = await trx('users')
    .insert({
      email,
      password_hash: passwordHash,
      name: displayName(profile, email),
      first_name: profile.first_name?.trim() || null,
      last_name: profile.last_name?.trim() || null,
      country: profile.country?.trim() || null,
      contact_number: profile.contact_number?.trim() || null,
    })
    .returning('id');
  return (user as { id: number }).id;
}

/** The organization a new session starts in: the last one the user used, else their oldest membership. */
export async function organizationOfNewSession(db: Knex | Knex.Transaction, userId: number): Promise<number | null> {
  const membership = await db('memberships as m')
    .join('users as u', 'u.id', 'm.user_id')
    .where('m.user_id', userId)
    .orderByRaw('m.organization_id = u.current_organization_id desc nulls last, m.created_at')
    .first('m.organization_id');
  return membership?.organization_id ?? null;
}

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

/** Registration, password sign-in, profile and sign-out. */
export class AccountsService {
  readonly #db: Knex;
  readonly #sessions: SessionStore;
  readonly #limiter: RateLimiter;
  readonly #signInThrottle: SignInThrottle;
  readonly #maxActiveResources: number;
  readonly #emailVerification: EmailVerificationService;

  constructor(deps: { db: Knex; sessions: SessionStore; limiter: RateLimiter; maxActiveResources: number; emailVerification: EmailVerificationService }) {
    this.#db = deps.db;
    this.#sessions = deps.sessions;
    this.#limiter = deps.limiter;
    this.#signInThrottle = new SignInThrottle(this.#limiter);
    this.#maxActiveResources = deps.maxActiveResources;
    this.#emailVerification = deps.emailVerification;
  }

  /**
   * Creates the user, their organization (super_admin, billing account) and a session, and emails a
   * verification link, atomically. The email stays unverified until the link is opened. Counted per
   * client address before any work, so the argon2 hash is not free for a flood.
   */
  async register(input: RegisterRequest, clientAddress: string): Promise<NewSession> {
    await this.#limiter.hit({ key: `register:address:${clientAddress}`, max: REGISTRATIONS_PER_ADDRESS, windowSeconds: FIFTEEN_MINUTES });
    const email = normalizeEmail(input.email);
    assertNewPassword(input.password, email);
    const organizationName = notBlank(input.organization, 'body/organization');
    const passwordHash = await hashPassword(input.password);
    try {
      return await this.#db.transaction(async (trx) => {
        const userId = await insertPasswordUser(trx, email, passwordHash, input);
        const organization = await createOrganizationWithOwner(trx, {
          name: organizationName,
          ownerId: userId,
          maxActiveResources: this.#maxActiveResources,
        });
        const session = await this.#sessions.create(trx, { userId, organizationId: organization.id, authMethod: 'password' });
        await this.#emailVerification.issue(trx, { id: userId, email, name: session.principal.user.name });
        return session;
      });
    } catch (error) {
      if (isUniqueViolation(error, 'users_email_unique')) {
        throw new AppError('EMAIL_TAKEN', 'An account with this email already exists.');
      }
      throw error;
    }
  }

  /**
   * Checks email and password and starts a session. Failures cost the same time whether or not the
   * account exists. Each attempt is counted before the password is checked, per client address and
   * per account at that address (see SignInThrottle); a success clears the account's count there.
   */
  async signIn(input: SignInRequest, clientAddress: string): Promise<NewSession> {
    const email = normalizeEmail(input.email);
    const attempt = await this.#signInThrottle.admit(email, clientAddress);
    const user = await this.#db('users').whereRaw('lower(email) = ?', [email]).first('id', 'password_hash');
    if (!(await verifyPassword(user?.password_hash, input.password)) || !user) {
      throw new AppError('INVALID_CREDENTIALS', 'Invalid email or password.');
    }
    await attempt.succeeded();
    const organizationId = await organizationOfNewSession(this.#db, user.id);
    return this.#sessions.create(this.#db, { userId: user.id, organizationId, authMethod: 'password' });
  }

  /** Updates the profile; `organization` completes a profile that has none. */
  async updateProfile(principal: SessionPrincipal, input: UpdateProfileRequest): Promise<SessionPrincipal> {
    const changes: Record<string, string | null> = {};
    if (input.name !== undefined) changes.name = notBlank(input.name, 'body/name');
    for (const field of ['first_name', 'last_name', 'country', 'contact_number'] as const) {
      const value = input[field];
      if (value !== undefined) changes[field] = value === null ? null : notBlank(value, `body/${field}`);
    }
    const organizationName = input.organization === undefined ? undefined : notBlank(input.organization, 'body/organization');
    if (organizationName !== undefined && principal.organization) {
      throw new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', {
        errors: [{ location: 'body/organization', message: 'you already have an organization; rename it with PATCH /v1/organization' }],
      });
    }
    await this.#db.transaction(async (trx) => {
      if (Object.keys(changes).length) await trx('users').where({ id: principal.user.id }).update(changes);
      if (organizationName !== undefined) {
        const organization = await createOrganizationWithOwner(trx, {
          name: organizationName,
          ownerId: principal.user.id,
          maxActiveResources: this.#maxActiveResources,
        });
        await this.#sessions.setOrganization(trx, principal.sessionId, organization.id);
      }
    });
    const refreshed = await this.#sessions.load(principal.sessionId);
    if (!refreshed) throw new AppError('UNAUTHENTICATED', 'The session ended.');
    return refreshed;
  }

  async logOut(principal: SessionPrincipal): Promise<void> {
    await this.#sessions.invalidate(principal.sessionId);
  }

}
