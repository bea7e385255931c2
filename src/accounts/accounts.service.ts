import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import { isUniqueViolation } from '../db/errors.ts';
import { AppError } from '../errors.ts';
import type { OrganizationsService } from '../organizations/organizations.service.ts';
import type { RateLimiter } from '../rate-limit/rate-limiter.ts';
import { SignInThrottle } from '../rate-limit/sign-in-throttle.ts';
import { normalizeEmail, notBlank } from '../validation.ts';
import { findUserByEmail, insertUser, organizationOfNewSession, updateUser } from './accounts.repository.ts';
import type { EmailVerificationService } from './email-verification.service.ts';
import { newUserProfile } from './identity-rules.ts';
import { assertNewPassword, hashPassword, verifyPassword } from './passwords.ts';
import type { SessionPrincipal } from '../principal.ts';
import type { NewSession, SessionStore } from './sessions.ts';

type RegisterRequest = components['schemas']['RegisterRequest'];
type SignInRequest = components['schemas']['SignInRequest'];
type UpdateProfileRequest = components['schemas']['UpdateProfileRequest'];

const FIFTEEN_MINUTES = 15 * 60;
/** Registrations one client address may attempt in 15 minutes: room for an office behind one NAT, bounded argon2 work for a flood. */
const REGISTRATIONS_PER_ADDRESS = 100;

/** Registration, password sign-in, profile and sign-out. */
export class AccountsService {
  readonly #db: Knex;
  readonly #sessions: SessionStore;
  readonly #limiter: RateLimiter;
  readonly #signInThrottle: SignInThrottle;
  readonly #organizations: OrganizationsService;
  readonly #emailVerification: EmailVerificationService;

  constructor(deps: {
    db: Knex;
    sessions: SessionStore;
    limiter: RateLimiter;
    organizations: OrganizationsService;
    emailVerification: EmailVerificationService;
  }) {
    this.#db = deps.db;
    this.#sessions = deps.sessions;
    this.#limiter = deps.limiter;
    this.#signInThrottle = new SignInThrottle(this.#limiter);
    this.#organizations = deps.organizations;
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
        const userId = await insertUser(trx, { email, password_hash: passwordHash, ...newUserProfile(input, email) });
        const organization = await this.#organizations.createWithOwner(trx, { name: organizationName, ownerId: userId });
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
    const user = await findUserByEmail(this.#db, email);
    if (!(await verifyPassword(user?.password_hash, input.password)) || !user) {
      throw new AppError('INVALID_CREDENTIALS', 'Invalid email or password.');
    }
    await attempt.succeeded();
    const organizationId = await organizationOfNewSession(this.#db, user.id);
    return this.#sessions.create(this.#db, { userId: user.id, organizationId, authMethod: 'password' });
  }

  /** Updates the profile; `organization` completes a profile that has none. */
  async updateProfile(principal: SessionPrincipal, input: UpdateProfileRequest): Promise<SessionPrincipal> {
    const changes: Parameters<typeof updateUser>[2] = {};
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
      if (Object.keys(changes).length) await updateUser(trx, principal.user.id, changes);
      if (organizationName !== undefined) {
        const organization = await this.#organizations.createWithOwner(trx, { name: organizationName, ownerId: principal.user.id });
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
