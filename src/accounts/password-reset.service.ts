import type { Knex } from 'knex';
import type { PgBoss } from 'pg-boss';
import { hashToken, randomToken } from '../crypto.ts';
import type { EmailOutbox } from '../email/email.outbox.ts';
import { passwordResetEmail } from '../email/templates.ts';
import { AppError } from '../errors.ts';
import type { JobDefinition } from '../jobs/queue.ts';
import type { RateLimiter } from '../rate-limit/rate-limiter.ts';
import { normalizeEmail } from '../validation.ts';
import {
  claimPasswordResetToken,
  findUser,
  findUserByEmail,
  insertPasswordResetToken,
  markEmailVerified,
  revokeWhatUnprovenHolderMade,
  spendPasswordResetTokensOfUser,
  updateUser,
} from './accounts.repository.ts';
import { assertNewPassword, assertPasswordLength, hashPassword } from './passwords.ts';
import type { SessionStore } from './sessions.ts';

export const PASSWORD_RESET_QUEUE = 'password-reset-request';
const TOKEN_LIFETIME_MS = 60 * 60 * 1000;
const HOUR = 60 * 60;
const FIFTEEN_MINUTES = 15 * 60;

/**
 * Password reset: a request enqueues a job and answers the same way whether or not the email has an
 * account (the lookup happens in the job, so timing reveals nothing either). The job issues a
 * single-use token, stored as its hash, valid one hour, and emails the link. Confirming sets the
 * password, spends every reset token of the user and ends every session of the user.
 */
export class PasswordResetService {
  readonly #db: Knex;
  readonly #boss: PgBoss;
  readonly #limiter: RateLimiter;
  readonly #sessions: SessionStore;

  constructor(deps: { db: Knex; boss: PgBoss; limiter: RateLimiter; sessions: SessionStore }) {
    this.#db = deps.db;
    this.#boss = deps.boss;
    this.#limiter = deps.limiter;
    this.#sessions = deps.sessions;
  }

  async request(rawEmail: string, clientAddress: string): Promise<void> {
    const email = normalizeEmail(rawEmail);
    await this.#limiter.hit({ key: `reset:address:${clientAddress}`, max: 20, windowSeconds: HOUR });
    await this.#limiter.hit({ key: `reset:email:${email}`, max: 5, windowSeconds: HOUR });
    await this.#boss.send(PASSWORD_RESET_QUEUE, { email });
  }

  /**
   * Sets the new password with an emailed token. The cheap checks come first: the length, a limit
   * per client address, then the token is claimed; only then is the password checked against the
   * account and hashed, so a bogus token costs no argon2 work. One transaction: the token and every
   * other outstanding reset token of the user are spent, the password is set, the email counts as
   * verified (the token came by email) and every session of the user ends. When nobody had proven
   * the address before, what the account made meanwhile is taken back (revokeWhatUnprovenHolderMade).
   */
  async confirm(token: string, password: string, clientAddress: string): Promise<void> {
    assertPasswordLength(password);
    await this.#limiter.hit({ key: `reset-confirm:address:${clientAddress}`, max: 30, windowSeconds: FIFTEEN_MINUTES });
    await this.#db.transaction(async (trx) => {
      const claimed = await claimPasswordResetToken(trx, hashToken(token));
      if (!claimed) {
        throw new AppError('INVALID_RESET_TOKEN', 'This reset link is invalid, expired or already used. Ask for a new one.');
      }
      const userId = claimed.user_id;
      const user = await findUser(trx, userId);
      if (!user) throw new Error(`user ${userId} of a reset token does not exist`);
      assertNewPassword(password, user.email);
      await updateUser(trx, userId, { password_hash: await hashPassword(password) });
      await spendPasswordResetTokensOfUser(trx, userId);
      // Nobody had proven the address: whoever registered it may have made credentials; none survive.
      if (user.email_verified_at === null) await revokeWhatUnprovenHolderMade(trx, userId);
      await markEmailVerified(trx, userId);
      await this.#sessions.invalidateAllOfUser(trx, userId);
    });
  }
}

/** Issues the token and queues the email, in one transaction, when the email has an account. */
export function passwordResetJob(deps: { db: Knex; outbox: EmailOutbox; webAppUrl: string }): JobDefinition<{ email: string }> {
  return {
    queue: PASSWORD_RESET_QUEUE,
    async handle({ email }, { log }) {
      await deps.db.transaction(async (trx) => {
        const user = await findUserByEmail(trx, email);
        if (!user) {
          log.info('password reset requested for an email with no account');
          return;
        }
        const token = randomToken(20);
        await insertPasswordResetToken(trx, {
          user_id: user.id,
          token_hash: hashToken(token),
          expires_at: new Date(Date.now() + TOKEN_LIFETIME_MS),
        });
        const link = `${deps.webAppUrl}/reset-password?token=${encodeURIComponent(token)}`;
        await deps.outbox.enqueue(trx, { to: user.email, template: 'password_reset', ...passwordResetEmail({ name: user.name, link }) });
      });
    },
  };
}
