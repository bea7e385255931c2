import type { Knex } from 'knex';
import { AppError } from '../errors.ts';

export interface Limit {
  /** What is counted, e.g. `signin:email:ada@example.com`. */
  key: string;
  max: number;
  windowSeconds: number;
}

interface Counter {
  hits: number;
  retryAfter: number;
}

/**
 * Fixed-window counters in Postgres, so a limit holds across every process of the service.
 * Each hit is one atomic upsert.
 */
export class RateLimiter {
  readonly #db: Knex;

  constructor(db: Knex) {
    this.#db = db;
  }

  /** Counts one hit; throws 429 `RATE_LIMITED` with `Retry-After` when it goes over the limit. */
  async hit(limit: Limit): Promise<void> {
    const counter = await this.#count(limit, 1);
    if (counter.hits > limit.max) throw limited(counter.retryAfter);
  }

  /** Throws 429 when the limit is already used up, without counting. */
  async check(limit: Limit): Promise<void> {
    const counter = await this.#count(limit, 0);
    if (counter.hits >= limit.max) throw limited(counter.retryAfter);
  }

  async reset(key: string): Promise<void> {
    await this.#db('rate_limits').where({ key }).delete();
  }

  async #count(limit: Limit, increment: number): Promise<Counter> {
    const { rows } = await this.#db.raw<{ rows: Array<{ hits: number; retry_after: number }> }>(
      `insert into rate_limits as r (key, window_started_at, hits) values (?, now(), ?)
       on conflict (key) do update set
         hits = case when r.window_started_at <= now() - make_interval(secs => ?) then excluded.hits else r.hits + excluded.hits end,
         window_started_at = case when r.window_started_at <= now() - make_interval(secs => ?) then now() else r.window_started_at end
       returning hits, ceil(extract(epoch from (window_started_at + make_interval(secs => ?) - now())))::int as retry_after`,
      [limit.key, increment, limit.windowSeconds, limit.windowSeconds, limit.windowSeconds],
    );
    const row = rows[0];
    return { hits: row?.hits ?? 0, retryAfter: Math.max(1, row?.retry_after ?? 1) };
  }
}

function limited(retryAfter: number): AppError {
  return new AppError('RATE_LIMITED', `Too many attempts. Try again in ${retryAfter} seconds.`, {
    headers: { 'Retry-After': String(retryAfter) },
  });
}
