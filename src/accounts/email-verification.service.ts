import type { Knex } from 'knex';
import { hashToken, randomToken } from '../crypto.ts';
import type { EmailOutbox } from '../email/email.outbox.ts';
import { emailVerificationEmail } from '../email/templates.ts';
import { AppError } from '../errors.ts';
import type { RateLimiter } from '../rate-limit/rate-limiter.ts';
import {
  claimEmailVerificationToken,
  findUser,
  insertEmailVerificationToken,
  markEmailVerified,
  spendEmailVerificationTokensOfUser,
  userHasEmail,
} from './accounts.repository.ts';
import type { SessionPrincipal } from '../principal.ts';

/** How long a verification link works. */
export const VERIFICATION_TOKEN_LIFETIME_HOURS = 24;
const HOUR = 60 * 60;

/**
 * Email verification: registration emails a single-use link, valid 24 hours, whose token is stored
 * only as its hash together with the address it proves. Confirming needs no session (the link is
 * opened in any browser); a signed-in user can ask for a new link, a few times an hour.
 */
export class EmailVerificationService {
  readonly #db: Knex;
  readonly #outbox: EmailOutbox;
  readonly #limiter: RateLimiter;
  readonly #webAppUrl: string;

  constructor(deps: { db: Knex; outbox: EmailOutbox; limiter: RateLimiter; webAppUrl: string }) {
    this.#db = deps.db;
    this.#outbox = deps.outbox;
    this.#limiter = deps.limiter;
    this.#webAppUrl = deps.webAppUrl;
  }

  /** Issues a token for the user's current email and queues the email, in the caller's transaction. */
  async issue(trx: Knex.Transaction, user: { id: number; email: string; name: string }): Promise<void> {
    const token = randomToken(20);
    await insertEmailVerificationToken(trx, {
      user_id: user.id,
      email: user.email.toLowerCase(),
      token_hash: hashToken(token),
      expires_at: new Date(Date.now() + VERIFICATION_TOKEN_LIFETIME_HOURS * HOUR * 1000),
    });
    const link = `${this.#webAppUrl}/verify-email?token=${encodeURIComponent(token)}`;
    await this.#outbox.enqueue(trx, {
      to: user.email,
      template: 'email_verification',
      ...emailVerificationEmail({ name: user.name, link, lifetimeHours: VERIFICATION_TOKEN_LIFETIME_HOURS }),
    });
  }

  /**
   * Spends the token and marks the address verified; every other outstanding link of the user is
   * spent too. At most 30 attempts per client address in 15 minutes, counted first.
   */
  async confirm(token: string, clientAddress: string): Promise<{ email: string }> {
    await this.#limiter.hit({ key: `verify-confirm:address:${clientAddress}`, max: 30, windowSeconds: 15 * 60 });
    return this.#db.transaction(async (trx) => {
      const claimed = await claimEmailVerificationToken(trx, hashToken(token));
      // A token for an address the account no longer has proves nothing about the account.
      if (!claimed || !(await userHasEmail(trx, claimed.user_id, claimed.email))) {
        throw new AppError('INVALID_VERIFICATION_TOKEN', 'This verification link is invalid, expired or already used. Sign in and ask for a new one.');
      }
      await markEmailVerified(trx, claimed.user_id);
      await spendEmailVerificationTokensOfUser(trx, claimed.user_id);
      return { email: claimed.email };
    });
  }

  /** Emails a new link to the signed-in user; earlier links stay valid until they expire. */
  async resend(principal: SessionPrincipal, clientAddress: string): Promise<void> {
    const user = await findUser(this.#db, principal.user.id);
    if (!user) throw new AppError('UNAUTHENTICATED', 'The session ended.');
    if (user.email_verified_at) throw new AppError('EMAIL_ALREADY_VERIFIED', `${user.email} is already verified.`);
    await this.#limiter.hit({ key: `verify-resend:user:${user.id}`, max: 5, windowSeconds: HOUR });
    await this.#limiter.hit({ key: `verify-resend:address:${clientAddress}`, max: 20, windowSeconds: HOUR });
    await this.#db.transaction((trx) => this.issue(trx, user));
  }
}
