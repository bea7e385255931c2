import type { Knex } from 'knex';
import { RateLimiterPostgres, RateLimiterRes } from 'rate-limiter-flexible';
import { AppError } from '../errors.ts';

export interface Limit {
  /** What is counted, e.g. `reset:email:ada@example.com`. */
  key: string;
  max: number;
  windowSeconds: number;
}

/** rate-limiter-flexible's Postgres store (created by a migration), shared by every process. */
const TABLE = 'rate_limit_points';
const LIMIT_PREFIX = 'limit';

/**
 * Fixed-window counters in Postgres (rate-limiter-flexible's Postgres store), so a limit holds
 * across every process of the service. Each hit is one atomic upsert that counts and answers at
 * once, so requests that arrive together cannot all pass a check before any of them is counted.
 */
export class RateLimiter {
  readonly #db: Knex;
  readonly #limiters = new Map<string, RateLimiterPostgres>();
  /** Deletes keys, and sweeps expired rows every 5 minutes (one sweeper per process is enough). */
  readonly #keys: RateLimiterPostgres;

  constructor(db: Knex) {
    this.#db = db;
    this.#keys = this.store({ prefix: LIMIT_PREFIX, points: 1, seconds: 1, sweep: true });
  }

  /** Counts one hit; throws 429 `RATE_LIMITED` with `Retry-After` when it goes over the limit. */
  async hit(limit: Limit): Promise<void> {
    await consume(this.#limiter(limit.max, limit.windowSeconds), limit.key);
  }

  async reset(key: string): Promise<void> {
    await this.#keys.delete(key);
  }

  /** A limiter of `points` per `seconds` in the shared table; `prefix` keeps its keys apart. */
  store(options: { prefix: string; points: number; seconds: number; sweep?: boolean }): RateLimiterPostgres {
    return new RateLimiterPostgres({
      storeClient: this.#db,
      storeType: 'knex',
      tableName: TABLE,
      tableCreated: true,
      keyPrefix: options.prefix,
      points: options.points,
      duration: options.seconds,
      clearExpiredByTimeout: options.sweep ?? false,
    });
  }

  #limiter(max: number, windowSeconds: number): RateLimiterPostgres {
    const name = `${max}/${windowSeconds}`;
    let limiter = this.#limiters.get(name);
    if (!limiter) {
      limiter = this.store({ prefix: LIMIT_PREFIX, points: max, seconds: windowSeconds });
      this.#limiters.set(name, limiter);
    }
    return limiter;
  }
}

/** Consumes one point; over the limit, throws 429 with the seconds until the key frees up. */
export async function consume(limiter: RateLimiterPostgres, key: string): Promise<RateLimiterRes> {
  try {
    return await limiter.consume(key);
  } catch (rejection) {
    if (rejection instanceof RateLimiterRes) throw limited(rejection.msBeforeNext);
    throw rejection;
  }
}

export function limited(msBeforeNext: number): AppError {
  const retryAfter = Math.max(1, Math.ceil(msBeforeNext / 1000));
  return new AppError('RATE_LIMITED', `Too many attempts. Try again in ${retryAfter} seconds.`, {
    headers: { 'Retry-After': String(retryAfter) },
  });
}
