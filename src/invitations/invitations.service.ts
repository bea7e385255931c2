import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import { findUserByEmail, insertUser, markEmailVerified, setCurrentOrganization } from '../accounts/accounts.repository.ts';
import { newUserProfile } from '../accounts/identity-rules.ts';
import { assertNewPassword, hashPassword } from '../accounts/passwords.ts';
import { requireOrganization, requireVerifiedEmail, roleAtLeast, type SessionPrincipal } from '../principal.ts';
import type { NewSession, SessionStore } from '../accounts/sessions.ts';
import { hashToken, randomToken } from '../crypto.ts';
import { isUniqueViolation } from '../db/errors.ts';
import type { InvitationRow } from '../db/models/invitations.ts';
import type { EmailOutbox } from '../email/email.outbox.ts';
import { invitationEmail } from '../email/templates.ts';
import { AppError } from '../errors.ts';
import type { JobDefinition } from '../jobs/queue.ts';
import type { OrganizationListCache } from '../organizations/list-cache.ts';
import { findMembership, insertMembership, isMemberByEmail } from '../organizations/organizations.repository.ts';
import type { RateLimiter } from '../rate-limit/rate-limiter.ts';
import { normalizeEmail } from '../validation.ts';
import { assertAnswerable, isUnanswered, LAPSE } from './invitation-status.ts';
import {
  expireLapsed,
  findInvitation,
  findInvitationView,
  findInvitationViewByToken,
  insertInvitation,
  listInvitationsOf,
  listOpenInvitationsTo,
  recordAnswer,
  reissueInvitation,
  revokeInvitation,
  toInvitation,
  type Invitation,
} from './invitations.repository.ts';

type CreateInvitationRequest = components['schemas']['CreateInvitationRequest'];
type InvitationPreview = components['schemas']['InvitationPreview'];
type RegisterWithInvitationRequest = components['schemas']['RegisterWithInvitationRequest'];

export const EXPIRE_INVITATIONS_QUEUE = 'expire-invitations';
const LIFETIME_MS = 7 * 24 * 60 * 60 * 1000;
const DAY_SECONDS = 24 * 60 * 60;

type Response = 'accept' | 'reject';

/**
 * Invitations, both sides: an organization's admins invite, list and resend; the invitee previews,
 * accepts or declines (signed in with the invitee email), or registers through the invitation.
 * Tokens are random, stored as hashes, valid 7 days; every email goes through the outbox.
 */
export class InvitationsService {
  readonly #db: Knex;
  readonly #outbox: EmailOutbox;
  readonly #sessions: SessionStore;
  readonly #limiter: RateLimiter;
  readonly #lists: OrganizationListCache;
  readonly #webAppUrl: string;

  /** Invitation emails an organization may send in 24 hours (`INVITATIONS_PER_DAY`). */
  readonly #perDay: number;

  constructor(deps: { db: Knex; outbox: EmailOutbox; sessions: SessionStore; limiter: RateLimiter; webAppUrl: string; lists: OrganizationListCache; perDay: number }) {
    this.#db = deps.db;
    this.#outbox = deps.outbox;
    this.#sessions = deps.sessions;
    this.#limiter = deps.limiter;
    this.#lists = deps.lists;
    this.#webAppUrl = deps.webAppUrl;
    this.#perDay = deps.perDay;
  }

  async create(principal: SessionPrincipal, input: CreateInvitationRequest): Promise<Invitation> {
    const organization = requireOrganization(principal);
    const role = input.role ?? 'member';
    assertMayInvite(principal, role);
    requireVerifiedEmail(principal, 'invite people');
    const email = normalizeEmail(input.email);
    await this.#countEmail(organization.id);
    try {
      return await this.#db.transaction(async (trx) => {
        if (await isMemberByEmail(trx, organization.id, email)) {
          throw new AppError('ALREADY_A_MEMBER', `${email} is already a member of ${organization.name}.`);
        }
        // A pending invitation past its expiry no longer blocks a new one.
        await expireLapsed(trx, { organizationId: organization.id, email });
        const invitee = await findUserByEmail(trx, email);
        const token = randomToken(24);
        const id = await insertInvitation(trx, {
          organization_id: organization.id,
          invitee_email: email,
          invitee_user_id: invitee?.id ?? null,
          invited_by_user_id: principal.user.id,
          role,
          token_hash: hashToken(token),
          expires_at: new Date(Date.now() + LIFETIME_MS),
        });
        await this.#sendEmail(trx, id, token, principal);
        return this.#read(trx, id);
      });
    } catch (error) {
      if (isUniqueViolation(error, 'invitations_one_pending')) {
        throw new AppError('INVITATION_ALREADY_PENDING', `${email} already has a pending invitation; resend it instead.`);
      }
      throw error;
    }
  }

  async list(principal: SessionPrincipal): Promise<Invitation[]> {
    const organization = requireOrganization(principal);
    return this.#lists.get(organization.id, 'invitations', async () => {
      const items = (await listInvitationsOf(this.#db, organization.id)).map(toInvitation);
      // A pending invitation reads as expired from its expiry on, with no change to its row.
      const lapses = items.filter((item) => item.status === LAPSE.from).map((item) => Date.parse(item.expires_at));
      return { body: items, size: items.length, validUntil: Math.min(...lapses) };
    });
  }

  /** A new token and a new 7-day expiry, and the email again; an expired invitation becomes pending. */
  async resend(principal: SessionPrincipal, invitationId: number): Promise<Invitation> {
    const organization = requireOrganization(principal);
    try {
      return await this.#db.transaction(async (trx) => {
        const invitation = await this.#ofOrganization(trx, organization, invitationId);
        assertMayInvite(principal, invitation.role);
        requireVerifiedEmail(principal, 'invite people');
        if (!isUnanswered(invitation)) {
          throw new AppError('INVITATION_NOT_PENDING', `Invitation ${invitationId} was ${invitation.status}; it cannot be resent.`);
        }
        await this.#countEmail(organization.id);
        const token = randomToken(24);
        await reissueInvitation(trx, invitationId, { token_hash: hashToken(token), expires_at: new Date(Date.now() + LIFETIME_MS) });
        await this.#sendEmail(trx, invitationId, token, principal);
        return this.#read(trx, invitationId);
      });
    } catch (error) {
      if (isUniqueViolation(error, 'invitations_one_pending')) {
        throw new AppError('INVITATION_ALREADY_PENDING', 'This email has a newer pending invitation; resend that one instead.');
      }
      throw error;
    }
  }

  /** Withdraws a pending or expired invitation: `revoked` is final and its token stops working. */
  async revoke(principal: SessionPrincipal, invitationId: number): Promise<Invitation> {
    const organization = requireOrganization(principal);
    return this.#db.transaction(async (trx) => {
      const invitation = await this.#ofOrganization(trx, organization, invitationId);
      assertMayInvite(principal, invitation.role);
      if (!isUnanswered(invitation)) {
        throw new AppError('INVITATION_NOT_PENDING', `Invitation ${invitationId} was ${invitation.status}; it cannot be revoked.`);
      }
      await revokeInvitation(trx, invitationId);
      return this.#read(trx, invitationId);
    });
  }

  /**
   * The pending invitations addressed to the caller's email. An unverified email sees none: nobody
   * proved the address is theirs, so they must not learn who invited it (the emailed token still works).
   */
  async listMine(principal: SessionPrincipal): Promise<Invitation[]> {
    if (!principal.user.emailVerified) return [];
    return (await listOpenInvitationsTo(this.#db, normalizeEmail(principal.user.email))).map(toInvitation);
  }

  async preview(token: string): Promise<InvitationPreview> {
    const row = await findInvitationViewByToken(this.#db, hashToken(token));
    if (!row) throw notFound();
    return {
      organization_name: row.organization_name,
      invitee_email: row.invitee_email,
      role: row.role,
      status: row.status,
      expires_at: row.expires_at,
    };
  }

  /** Refuses a token that cannot be accepted (404, 410, 409), before an SSO sign-in on its behalf. */
  async assertOpen(token: string): Promise<void> {
    const invitation = await findInvitation(this.#db, { tokenHash: hashToken(token) });
    if (!invitation) throw notFound();
    assertAnswerable(invitation);
  }

  /**
   * Accepts or declines by token; the signed-in user's email must be the invitee's. The token came
   * by email, so using it proves the address.
   */
  async respondByToken(principal: SessionPrincipal, token: string, response: Response): Promise<Invitation> {
    return this.#respond(principal, response, { tokenHash: hashToken(token) }, 'token');
  }

  /**
   * Accepts or declines one of the caller's invitations by id; someone else's is not found. Without
   * the token, only a verified email proves the caller is the invitee: an unverified one is refused
   * before any invitation is looked up.
   */
  async respondById(principal: SessionPrincipal, invitationId: number, response: Response): Promise<Invitation> {
    if (!principal.user.emailVerified) {
      throw new AppError('EMAIL_NOT_VERIFIED', 'Verify your email first (open the link we emailed you), or use the link of the invitation email.');
    }
    return this.#respond(principal, response, { id: invitationId }, 'id');
  }

  /**
   * Creates a password account for the invitee email (verified: the token came by email), joins the
   * organization, signs in. The token is looked up before the password is hashed.
   */
  async register(input: RegisterWithInvitationRequest, clientAddress: string): Promise<NewSession> {
    await this.#limiter.hit({ key: `invitation-register:address:${clientAddress}`, max: 30, windowSeconds: 15 * 60 });
    const found = await findInvitation(this.#db, { tokenHash: hashToken(input.token) });
    if (!found) throw notFound();
    assertAnswerable(found);
    assertNewPassword(input.password, found.invitee_email);
    const passwordHash = await hashPassword(input.password);
    try {
      return await this.#db.transaction(async (trx) => {
        const invitation = await findInvitation(trx, { tokenHash: hashToken(input.token) }, { forUpdate: true });
        if (!invitation) throw notFound();
        assertAnswerable(invitation);
        const email = invitation.invitee_email;
        const userId = await insertUser(trx, { email, password_hash: passwordHash, ...newUserProfile(input, email) });
        await markEmailVerified(trx, userId);
        await join(trx, invitation, userId);
        return this.#sessions.create(trx, { userId, organizationId: invitation.organization_id, authMethod: 'password' });
      });
    } catch (error) {
      if (isUniqueViolation(error, 'users_email_unique')) {
        throw new AppError('EMAIL_TAKEN', 'This email already has an account: sign in, then accept the invitation.');
      }
      throw error;
    }
  }

  /** Marks every pending invitation past its expiry as expired (the scheduled job). */
  async expireOverdue(): Promise<number> {
    return expireLapsed(this.#db, 'all');
  }

  async #respond(
    principal: SessionPrincipal,
    response: Response,
    lookup: { tokenHash: string } | { id: number },
    by: 'token' | 'id',
  ): Promise<Invitation> {
    return this.#db.transaction(async (trx) => {
      const invitation = await findInvitation(trx, lookup, { forUpdate: true });
      const mine = invitation && invitation.invitee_email === normalizeEmail(principal.user.email);
      if (!invitation || (!mine && by === 'id')) throw notFound();
      if (!mine) {
        throw new AppError('INVITATION_EMAIL_MISMATCH', `This invitation is addressed to another email; sign in as ${invitation.invitee_email}.`);
      }
      assertAnswerable(invitation);
      if (response === 'accept') {
        if (await findMembership(trx, invitation.organization_id, principal.user.id)) {
          throw new AppError('ALREADY_A_MEMBER', 'You are already a member of this organization.');
        }
        await join(trx, invitation, principal.user.id);
        await this.#sessions.setOrganization(trx, principal.sessionId, invitation.organization_id);
      } else {
        await recordAnswer(trx, invitation.id, { status: 'rejected' });
      }
      if (by === 'token') await markEmailVerified(trx, principal.user.id);
      return this.#read(trx, invitation.id);
    });
  }

  /** One more invitation email of the organization today: 429 `RATE_LIMITED` past `INVITATIONS_PER_DAY`. */
  async #countEmail(organizationId: number): Promise<void> {
    await this.#limiter.hit({ key: `invitations:organization:${organizationId}`, max: this.#perDay, windowSeconds: DAY_SECONDS }).catch((error: unknown) => {
      if (!(error instanceof AppError) || error.code !== 'RATE_LIMITED') throw error;
      const detail = `Your organization has sent ${this.#perDay} invitation emails in 24 hours, its limit; try again in ${error.headers['Retry-After']} seconds.`;
      throw new AppError('RATE_LIMITED', detail, { headers: error.headers });
    });
  }

  async #sendEmail(trx: Knex.Transaction, invitationId: number, token: string, inviter: SessionPrincipal): Promise<void> {
    const invitation = await findInvitation(trx, { id: invitationId });
    if (!invitation) throw notFound();
    await this.#outbox.enqueue(trx, {
      to: invitation.invitee_email,
      template: 'invitation',
      invitationId,
      ...invitationEmail({
        organization: inviter.organization?.name ?? '',
        inviter: inviter.user.name,
        role: invitation.role,
        link: `${this.#webAppUrl}/invitations/${encodeURIComponent(token)}`,
        expiresAt: invitation.expires_at,
      }),
    });
  }

  /** The organization's invitation, locked for a change; 404 when it has none such. */
  async #ofOrganization(trx: Knex.Transaction, organization: { id: number; name: string }, invitationId: number): Promise<InvitationRow> {
    const invitation = await findInvitation(trx, { id: invitationId, organizationId: organization.id }, { forUpdate: true });
    if (!invitation) throw new AppError('INVITATION_NOT_FOUND', `Invitation ${invitationId} was not found in ${organization.name}.`);
    return invitation;
  }

  async #read(db: Knex | Knex.Transaction, invitationId: number): Promise<Invitation> {
    const row = await findInvitationView(db, invitationId);
    if (!row) throw notFound();
    return toInvitation(row);
  }
}

/** Only a super_admin may invite (or re-invite) an admin. */
function assertMayInvite(principal: SessionPrincipal, role: string): void {
  if (role === 'admin' && !roleAtLeast(principal.role, 'super_admin')) {
    throw new AppError('FORBIDDEN', 'Only a super_admin may invite an admin.');
  }
}

/** The invitee joins with the invitation's role; the organization becomes their current one. */
async function join(trx: Knex.Transaction, invitation: Pick<InvitationRow, 'id' | 'organization_id' | 'role'>, userId: number): Promise<void> {
  await insertMembership(trx, { organization_id: invitation.organization_id, user_id: userId, role: invitation.role });
  await recordAnswer(trx, invitation.id, { status: 'accepted', userId });
  await setCurrentOrganization(trx, userId, invitation.organization_id);
}

function notFound(): AppError {
  return new AppError('INVITATION_NOT_FOUND', 'No invitation matches this link; it may have been replaced by a newer email.');
}

/** Every 10 minutes, pending invitations past their expiry are recorded as expired. */
export function expireInvitationsJob(invitations: InvitationsService): JobDefinition<object> {
  return {
    queue: EXPIRE_INVITATIONS_QUEUE,
    schedule: '*/10 * * * *',
    async handle(_data, { log }) {
      const expired = await invitations.expireOverdue();
      if (expired) log.info({ expired }, 'invitations expired');
    },
  };
}
