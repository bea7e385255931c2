import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import { insertPasswordUser, isUniqueViolation, normalizeEmail } from '../accounts/accounts.service.ts';
import { markEmailVerified } from '../accounts/email-verification.service.ts';
import { assertNewPassword, hashPassword } from '../accounts/passwords.ts';
import { roleAtLeast, type SessionPrincipal } from '../accounts/principal.ts';
import type { NewSession, SessionStore } from '../accounts/sessions.ts';
import { hashToken, randomToken } from '../crypto.ts';
import type { EmailOutbox } from '../email/email.outbox.ts';
import { invitationEmail } from '../email/templates.ts';
import { AppError } from '../errors.ts';
import type { JobDefinition } from '../jobs/queue.ts';
import { requireOrganization } from '../organizations/organizations.service.ts';
import type { RateLimiter } from '../rate-limit/rate-limiter.ts';
import { invitationsQuery, toInvitation, type Invitation, type InvitationRow } from './invitations.repository.ts';

type CreateInvitationRequest = components['schemas']['CreateInvitationRequest'];
type InvitationPreview = components['schemas']['InvitationPreview'];
type RegisterWithInvitationRequest = components['schemas']['RegisterWithInvitationRequest'];

export const EXPIRE_INVITATIONS_QUEUE = 'expire-invitations';
const LIFETIME_MS = 7 * 24 * 60 * 60 * 1000;

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
  readonly #webAppUrl: string;

  constructor(deps: { db: Knex; outbox: EmailOutbox; sessions: SessionStore; limiter: RateLimiter; webAppUrl: string }) {
    this.#db = deps.db;
    this.#outbox = deps.outbox;
    this.#sessions = deps.sessions;
    this.#limiter = deps.limiter;
    this.#webAppUrl = deps.webAppUrl;
  }

  async create(principal: SessionPrincipal, input: CreateInvitationRequest): Promise<Invitation> {
    const organization = requireOrganization(principal);
    const role = input.role ?? 'member';
    assertMayInvite(principal, role);
    const email = normalizeEmail(input.email);
    try {
      return await this.#db.transaction(async (trx) => {
        const member = await trx('memberships as m')
          .join('users as u', 'u.id', 'm.user_id')
          .where('m.organization_id', organization.id)
          .whereRaw('lower(u.email) = ?', [email])
          .first('m.id');
        if (member) throw new AppError('ALREADY_A_MEMBER', `${email} is already a member of ${organization.name}.`);
        // A pending invitation past its expiry no longer blocks a new one.
        await expirePending(trx, { organization_id: organization.id, invitee_email: email });
        const invitee = await trx('users').whereRaw('lower(email) = ?', [email]).first('id');
        const token = randomToken(24);
        const [created] = await trx('invitations')
          .insert({
            organization_id: organization.id,
            invitee_email: email,
            invitee_user_id: invitee?.id ?? null,
            invited_by_user_id: principal.user.id,
            role,
            token_hash: hashToken(token),
            expires_at: new Date(Date.now() + LIFETIME_MS),
          })
          .returning('id');
        const id = (created as { id: number }).id;
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
    const rows: InvitationRow[] = await invitationsQuery(this.#db).where('i.organization_id', organization.id).orderBy([
      { column: 'i.created_at', order: 'desc' },
      { column: 'i.id', order: 'desc' },
    ]);
    return rows.map(toInvitation);
  }

  /** A new token and a new 7-day expiry, and the email again; an expired invitation becomes pending. */
  async resend(principal: SessionPrincipal, invitationId: number): Promise<Invitation> {
    const organization = requireOrganization(principal);
    try {
      return await this.#db.transaction(async (trx) => {
        const invitation = await trx('invitations').where({ id: invitationId, organization_id: organization.id }).forUpdate().first();
        if (!invitation) throw new AppError('INVITATION_NOT_FOUND', `Invitation ${invitationId} was not found in ${organization.name}.`);
        assertMayInvite(principal, invitation.role);
        if (invitation.status !== 'pending' && invitation.status !== 'expired') {
          throw new AppError('INVITATION_NOT_PENDING', `Invitation ${invitationId} was ${invitation.status}; it cannot be resent.`);
        }
        const token = randomToken(24);
        await trx('invitations')
          .where({ id: invitationId })
          .update({ token_hash: hashToken(token), status: 'pending', expires_at: new Date(Date.now() + LIFETIME_MS) });
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
      const invitation = await trx('invitations').where({ id: invitationId, organization_id: organization.id }).forUpdate().first();
      if (!invitation) throw new AppError('INVITATION_NOT_FOUND', `Invitation ${invitationId} was not found in ${organization.name}.`);
      assertMayInvite(principal, invitation.role);
      if (invitation.status !== 'pending' && invitation.status !== 'expired') {
        throw new AppError('INVITATION_NOT_PENDING', `Invitation ${invitationId} was ${invitation.status}; it cannot be revoked.`);
      }
      await trx('invitations').where({ id: invitationId }).update({ status: 'revoked' });
      return this.#read(trx, invitationId);
    });
  }

  /**
   * The pending invitations addressed to the caller's email. An unverified email sees none: nobody
   * proved the address is theirs, so they must not learn who invited it (the emailed token still works).
   */
  async listMine(principal: SessionPrincipal): Promise<Invitation[]> {
    if (!principal.user.emailVerified) return [];
    const rows: InvitationRow[] = await invitationsQuery(this.#db)
      .where('i.invitee_email', normalizeEmail(principal.user.email))
      .where('i.status', 'pending')
      .where('i.expires_at', '>', this.#db.fn.now())
      .orderBy([
        { column: 'i.created_at', order: 'desc' },
        { column: 'i.id', order: 'desc' },
      ]);
    return rows.map(toInvitation);
  }

  async preview(token: string): Promise<InvitationPreview> {
    const row: InvitationRow | undefined = await invitationsQuery(this.#db).where('i.token_hash', hashToken(token)).first();
    if (!row) throw notFound();
    return {
      organization_name: row.organization_name,
      invitee_email: row.invitee_email,
      role: row.role,
      status: row.status,
      expires_at: row.expires_at.toISOString(),
    };
  }

  /** Refuses a token that cannot be accepted (404, 410, 409), before an SSO sign-in on its behalf. */
  async assertOpen(token: string): Promise<void> {
    const invitation = await this.#db('invitations').where({ token_hash: hashToken(token) }).first('status', 'expires_at');
    if (!invitation) throw notFound();
    assertPending(invitation);
  }

  /**
   * Accepts or declines by token; the signed-in user's email must be the invitee's. The token came
   * by email, so using it proves the address.
   */
  async respondByToken(principal: SessionPrincipal, token: string, response: Response): Promise<Invitation> {
    return this.#respond(principal, response, (trx) => trx('invitations').where({ token_hash: hashToken(token) }), 'token');
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
    return this.#respond(principal, response, (trx) => trx('invitations').where({ id: invitationId }), 'id');
  }

  /**
   * Creates a password account for the invitee email (verified: the token came by email), joins the
   * organization, signs in. The token is looked up before the password is hashed.
   */
  async register(input: RegisterWithInvitationRequest, clientAddress: string): Promise<NewSession> {
    await this.#limiter.hit({ key: `invitation-register:address:${clientAddress}`, max: 30, windowSeconds: 15 * 60 });
    const found = await this.#db('invitations').where({ token_hash: hashToken(input.token) }).first('invitee_email', 'status', 'expires_at');
    if (!found) throw notFound();
    assertPending(found);
    assertNewPassword(input.password, found.invitee_email);
    const passwordHash = await hashPassword(input.password);
    try {
      return await this.#db.transaction(async (trx) => {
        const invitation = await trx('invitations').where({ token_hash: hashToken(input.token) }).forUpdate().first();
        if (!invitation) throw notFound();
        assertPending(invitation);
        const userId = await insertPasswordUser(trx, invitation.invitee_email, passwordHash, input);
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
    return expirePending(this.#db, {});
  }

  async #respond(
    principal: SessionPrincipal,
    response: Response,
    find: (trx: Knex.Transaction) => Knex.QueryBuilder,
    by: 'token' | 'id',
  ): Promise<Invitation> {
    return this.#db.transaction(async (trx) => {
      const invitation = await find(trx).forUpdate().first();
      const mine = invitation && invitation.invitee_email === normalizeEmail(principal.user.email);
      if (!invitation || (!mine && by === 'id')) throw notFound();
      if (!mine) {
        throw new AppError('INVITATION_EMAIL_MISMATCH', `This invitation is addressed to another email; sign in as ${invitation.invitee_email}.`);
      }
      assertPending(invitation);
      if (response === 'accept') {
        const member = await trx('memberships').where({ organization_id: invitation.organization_id, user_id: principal.user.id }).first('id');
        if (member) throw new AppError('ALREADY_A_MEMBER', 'You are already a member of this organization.');
        await join(trx, invitation, principal.user.id);
        await this.#sessions.setOrganization(trx, principal.sessionId, invitation.organization_id);
      } else {
        await trx('invitations').where({ id: invitation.id }).update({ status: 'rejected', responded_at: trx.fn.now() });
      }
      if (by === 'token') await markEmailVerified(trx, principal.user.id);
      return this.#read(trx, invitation.id);
    });
  }

  async #sendEmail(trx: Knex.Transaction, invitationId: number, token: string, inviter: SessionPrincipal): Promise<void> {
    const invitation = await trx('invitations').where({ id: invitationId }).first('invitee_email', 'role', 'expires_at');
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

  async #read(db: Knex | Knex.Transaction, invitationId: number): Promise<Invitation> {
    const row: InvitationRow | undefined = await invitationsQuery(db).where('i.id', invitationId).first();
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

function assertPending(invitation: { status: string; expires_at: Date }): void {
  if (invitation.status === 'expired' || (invitation.status === 'pending' && invitation.expires_at.getTime() <= Date.now())) {
    throw new AppError('INVITATION_EXPIRED', 'This invitation has expired; ask for a new one.');
  }
  if (invitation.status !== 'pending') {
    throw new AppError('INVITATION_NOT_PENDING', `This invitation was already ${invitation.status}.`);
  }
}

/** The invitee joins with the invitation's role; the organization becomes their current one. */
async function join(trx: Knex.Transaction, invitation: { id: number; organization_id: number; role: string }, userId: number): Promise<void> {
  await trx('memberships').insert({ organization_id: invitation.organization_id, user_id: userId, role: invitation.role });
  await trx('invitations')
    .where({ id: invitation.id })
    .update({ status: 'accepted', responded_at: trx.fn.now(), invitee_user_id: userId });
  await trx('users').where({ id: userId }).update({ current_organization_id: invitation.organization_id });
}

function expirePending(db: Knex | Knex.Transaction, where: Record<string, unknown>): Promise<number> {
  return db('invitations').where({ ...where, status: 'pending' }).where('expires_at', '<=', db.fn.now()).update({ status: 'expired' });
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
