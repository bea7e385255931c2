import { RateLimiterRes, type RateLimiterPostgres } from 'rate-limiter-flexible';
import { consume, limited, type RateLimiter } from './rate-limiter.ts';

const MINUTE = 60;
const DAY = 24 * 60 * MINUTE;

/** Attempts per account and client address before a delay, and how the delay grows. */
export const SIGN_IN_FREE_ATTEMPTS = 5;
export const SIGN_IN_FIRST_DELAY_SECONDS = MINUTE;
export const SIGN_IN_MAX_DELAY_SECONDS = 60 * MINUTE;
/** Attempts per client address, whatever the account. */
export const SIGN_IN_ADDRESS_LIMIT = { max: 100, windowSeconds: 15 * MINUTE };
/** Failures in a row per account from all addresses together, then one attempt per interval. */
export const SIGN_IN_ACCOUNT_FREE_FAILURES = 20;
export const SIGN_IN_ACCOUNT_INTERVAL_SECONDS = MINUTE;

export interface SignInAttempt {
  /** The password was right: the account's counters at this address start over. */
  succeeded(): Promise<void>;
}

/**
 * Brute-force protection of password sign-in (rate-limiter-flexible's login-protection pattern on
 * its Postgres store). Every attempt is counted atomically BEFORE the password is checked, so
 * parallel guesses cannot all pass a check before any is counted. Three counters: per client
 * address, per account and address (growing holds), and per account from all addresses (one attempt
 * a minute after 20 failures in a row: slow for a guesser, never a lockout for the owner). Limits
 * and reasons: docs/decisions/2026-11-23-sign-in-throttling.md.
 */
export class SignInThrottle {
  readonly #limiter: RateLimiter;
  readonly #attempts: RateLimiterPostgres;
  readonly #holds: RateLimiterPostgres;
  readonly #accountFailures: RateLimiterPostgres;
  readonly #accountSlots: RateLimiterPostgres;

  constructor(limiter: RateLimiter) {
    this.#limiter = limiter;
    this.#attempts = limiter.store({ prefix: 'signin-attempts', points: SIGN_IN_FREE_ATTEMPTS, seconds: DAY });
    this.#holds = limiter.store({ prefix: 'signin-holds', points: 1_000, seconds: DAY });
    this.#accountFailures = limiter.store({ prefix: 'signin-account', points: SIGN_IN_ACCOUNT_FREE_FAILURES, seconds: DAY });
    this.#accountSlots = limiter.store({ prefix: 'signin-account-slot', points: 1, seconds: SIGN_IN_ACCOUNT_INTERVAL_SECONDS });
  }

  /** Counts the attempt, or throws 429 `RATE_LIMITED` (with `Retry-After`) without checking anything. */
  async admit(email: string, clientAddress: string): Promise<SignInAttempt> {
    await this.#limiter.hit({ key: `signin:address:${clientAddress}`, ...SIGN_IN_ADDRESS_LIMIT });
    // The address comes first and never holds a `|`, so no two pairs share a key.
    const key = `${clientAddress}|${email}`;
    try {
      await this.#attempts.consume(key);
    } catch (rejection) {
      if (!(rejection instanceof RateLimiterRes)) throw rejection;
      // The one attempt that went over the allowance starts the hold; the others report it.
      if (rejection.consumedPoints === SIGN_IN_FREE_ATTEMPTS + 1) throw limited((await this.#hold(key)) * 1000);
      throw limited(rejection.msBeforeNext);
    }
    await this.#admitForAccount(email);
    return {
      succeeded: async () => {
        await Promise.all([this.#attempts.delete(key), this.#holds.delete(key), this.#accountFailures.delete(email), this.#accountSlots.delete(email)]);
      },
    };
  }

  /** Past the account's free failures, one attempt per interval from all addresses together. */
  async #admitForAccount(email: string): Promise<void> {
    try {
      await this.#accountFailures.consume(email);
    } catch (rejection) {
      if (!(rejection instanceof RateLimiterRes)) throw rejection;
      await consume(this.#accountSlots, email);
    }
  }

  /** Holds the pair for a delay that doubles with each hold in 24 hours; returns the delay in seconds. */
  async #hold(key: string): Promise<number> {
    const holds = await this.#holds.penalty(key);
    const seconds = Math.min(SIGN_IN_FIRST_DELAY_SECONDS * 2 ** (holds.consumedPoints - 1), SIGN_IN_MAX_DELAY_SECONDS);
    await this.#attempts.block(key, seconds);
    return seconds;
  }
}
