import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { ApiKeyPrincipal } from '../accounts/principal.ts';
import { calendarMonth, formatResetDuration, type EffectiveLimits } from '../api-keys/key-limits.ts';
import { AppError } from '../errors.ts';

/** Each process takes this part of a limit at a time (at least 1 unit): a twentieth of a per-minute limit… */
const MINUTE_SHARE = 1 / 20;
/** …and a thousandth of a monthly budget. */
const MONTH_SHARE = 1 / 1000;
/**
 * A share of a per-minute limit is used within this time or dropped: by then the shared count has
 * leaked as much as the share (1/20 of a minute's capacity), so an idle process cannot hold on to
 * units the others already count as free again.
 */
const MINUTE_SHARE_TTL_MS = 60_000 * MINUTE_SHARE;
/** Hosted-model prices are trusted this long without a lookup. */
const PRICES_TTL_MS = 60_000;

type Kind = 'requests' | 'tokens' | 'monthly_tokens' | 'monthly_spend';

interface Limit {
  kind: Kind;
  /** The bucket's name in `api_key_limit_buckets` (a monthly one names its month). */
  bucket: string;
  capacity: number;
  /** Units the shared count forgets per second: capacity / 60 per minute, none for a month. */
  leakPerSecond: number;
  /** When the limit is whole again at the latest (the month's end), for a budget. */
  endsAt?: number;
}

/**
 * What this process holds of one limit of one key: `local` units taken from the shared count and
 * not used yet (negative: used beyond them, owed to the count), and the count's `remaining` as of
 * the last take.
 */
interface Share {
  local: number;
  remaining: number;
  takenAt: number;
  /** A take under way: the requests that need one together wait for it. */
  pending?: Promise<number>;
}

/** An admitted request: what it still owes once its tokens are known. */
export interface Admission {
  keyId: number;
  limits: readonly Limit[];
}

/**
 * Per-key limits of the inference proxy (requests and tokens per minute, a monthly token and spend
 * budget; see `ApiKeyLimits` in the spec), with no database write per request and correct across
 * processes sharing one Postgres: each process takes shares of every limit from a count in
 * Postgres (`take_from_api_key_bucket`, under the row's lock), a twentieth of a per-minute limit or a
 * thousandth of a monthly budget at a time, and admits requests from its share in memory; the
 * requests that find the share empty together wait for one take. Tokens are known when an answer
 * ends: they are taken from the share then, and what goes beyond it is owed and paid to the count at
 * the next take. What N processes admit together:
 * - requests: never more than the limit's bucket would admit to one process, plus at most N shares
 *   (an unused share of a per-minute limit is dropped after 3 s, the time the count takes to forget it);
 * - tokens and spend: beyond that, at most what the requests admitted while some share was left use
 *   (a request is admitted while any token is left; its answer may use more).
 * A key with no limit (its own, or its organization's default) costs nothing here.
 */
export class KeyLimiter {
  readonly #db: Knex;
  readonly #log: Logger;
  /** Per key, its shares by bucket. */
  readonly #shares = new Map<number, Map<string, Share>>();
  #prices: { at: number; byModel: Promise<Map<string, number>> } | undefined;
  /** Each cached key state's limits as buckets, until the month ends. */
  readonly #buckets = new WeakMap<EffectiveLimits, { until: number; limits: Limit[] }>();

  constructor(db: Knex, log: Logger) {
    this.#db = db;
    this.#log = log;
  }

  /**
   * Admits a request of the key, or throws 429 (`rate_limit_exceeded` with the wait, or
   * `insufficient_quota` for a budget used up); the `x-ratelimit-*` headers for the answer go in
   * `headers`. Undefined when nothing limits the key. While this process's shares last, it answers
   * at once (no promise); it waits only for a take from the shared counts.
   */
  admit(principal: ApiKeyPrincipal, headers: Record<string, string>): Admission | undefined | Promise<Admission> {
    const { limits: effective } = principal;
    if (!effective) return undefined;
    const now = Date.now();
    const limits = this.#limitsOf(effective, now);
    const shares = limits.map((limit) => this.#share(principal.keyId, limit));
    if (!limits.every((limit, i) => holdsUnit(limit, shares[i] as Share, now))) return this.#admitAfterTakes(principal.keyId, limits, headers, now);
    const requests = limits.findIndex((limit) => limit.kind === 'requests');
    if (requests >= 0) (shares[requests] as Share).local -= 1;
    Object.assign(headers, headersOf(limits, (limit) => this.#peek(principal.keyId, limit)));
    return { keyId: principal.keyId, limits };
  }

  async #admitAfterTakes(keyId: number, limits: readonly Limit[], headers: Record<string, string>, now: number): Promise<Admission> {
    let request: Share | undefined;
    for (const limit of limits) {
      const share = await this.#claim(keyId, limit, now);
      if (!share) {
        // The request unit claimed is given back: this request is not made.
        if (request) request.local += 1;
        throw refusal(limit, this.#share(keyId, limit), headersOf(limits, (l) => this.#peek(keyId, l)), now);
      }
      if (limit.kind === 'requests') request = share;
    }
    Object.assign(headers, headersOf(limits, (limit) => this.#peek(keyId, limit)));
    return { keyId, limits };
  }

  /** The key's limits as buckets, made once per key state and month. */
  #limitsOf(effective: EffectiveLimits, now: number): Limit[] {
    let cached = this.#buckets.get(effective);
    if (!cached || now >= cached.until) {
      const month = calendarMonth(now);
      cached = { until: month.endsAt, limits: limitsOf(effective, month) };
      this.#buckets.set(effective, cached);
    }
    return cached.limits;
  }

  /**
   * Counts what an admitted request used once its answer ended: its tokens, and for a hosted model
   * the tokens' price (`model`: the hosted model's name; null for a deployment of the organization,
   * which is billed by GPU time). Anything owed beyond this process's share is paid in the background.
   */
  settle(admission: Admission | undefined, used: { tokens: number; hostedModel: string | null }): void {
    if (!admission || used.tokens <= 0) return;
    void this.#settle(admission, used).catch((error: unknown) => this.#log.error({ err: error, api_key_id: admission.keyId }, 'key limit usage could not be counted'));
  }

  /** Gives back to the shared counts what this process holds of monthly budgets (a graceful stop). */
  async stop(): Promise<void> {
    for (const [keyId, shares] of this.#shares) {
      for (const [bucket, share] of shares) {
        if (!bucket.startsWith('monthly_') || share.local < 1) continue;
        await this.#take(keyId, { bucket, capacity: Number.MAX_SAFE_INTEGER, leakPerSecond: 0 }, 0, -Math.floor(share.local)).catch(() => undefined);
      }
    }
    this.#shares.clear();
  }

  async #settle(admission: Admission, used: { tokens: number; hostedModel: string | null }): Promise<void> {
    for (const limit of admission.limits) {
      let amount = 0;
      if (limit.kind === 'tokens' || limit.kind === 'monthly_tokens') amount = used.tokens;
      if (limit.kind === 'monthly_spend' && used.hostedModel) amount = used.tokens * (await this.#pricePerToken(used.hostedModel)) * 1_000_000;
      if (amount <= 0) continue;
      const share = this.#share(admission.keyId, limit);
      share.local -= amount;
      // Owed units are paid at once, so the other processes see them within a round trip.
      if (share.local < 0) await this.#refill(admission.keyId, limit, share);
    }
  }

  /**
   * The share of `limit` once it holds a unit for this request (one request unit is taken from it
   * at once; tokens and spend only need one left), refilled from the shared count when empty, one
   * take at a time per share; undefined when the shared count has nothing left.
   */
  async #claim(keyId: number, limit: Limit, now: number): Promise<Share | undefined> {
    const share = this.#share(keyId, limit);
    if (expired(limit, share, now)) share.local = 0;
    // Requests that waited on one take may find it used up by the others: they take again, until
    // the shared count has nothing left. Checked and claimed with no await in between.
    while (share.local < 1) if ((await this.#refill(keyId, limit, share)) === 0 && share.local < 1) return undefined;
    if (limit.kind === 'requests') share.local -= 1;
    return share;
  }

  /** Takes a share from the shared count (paying what is owed); resolves with the units granted. */
  #refill(keyId: number, limit: Limit, share: Share): Promise<number> {
    share.pending ??= (async () => {
      try {
        const wanted = Math.max(1, Math.floor(limit.capacity * (limit.leakPerSecond > 0 ? MINUTE_SHARE : MONTH_SHARE)));
        const owed = Math.max(0, -share.local);
        const taken = await this.#take(keyId, limit, wanted, owed);
        share.local = Math.max(0, share.local) + taken.granted;
        share.remaining = taken.remaining;
        share.takenAt = Date.now();
        return taken.granted;
      } finally {
        share.pending = undefined;
      }
    })();
    return share.pending;
  }

  async #take(keyId: number, limit: Pick<Limit, 'bucket' | 'capacity' | 'leakPerSecond'>, want: number, debt: number): Promise<{ granted: number; remaining: number }> {
    const { rows } = await this.#db.raw<{ rows: Array<{ granted: number; remaining: number }> }>('select granted, remaining from take_from_api_key_bucket(?, ?, ?, ?, ?, ?)', [
      keyId,
      limit.bucket,
      limit.capacity,
      limit.leakPerSecond,
      want,
      debt,
    ]);
    const [row] = rows;
    if (!row) throw new Error('take_from_api_key_bucket returned nothing');
    return row;
  }

  #share(keyId: number, limit: Pick<Limit, 'bucket'>): Share {
    let shares = this.#shares.get(keyId);
    if (!shares) {
      shares = new Map();
      this.#shares.set(keyId, shares);
    }
    let share = shares.get(limit.bucket);
    if (!share) {
      share = { local: 0, remaining: Number.POSITIVE_INFINITY, takenAt: 0 };
      forgetOldMonths(shares, limit.bucket);
      shares.set(limit.bucket, share);
    }
    return share;
  }

  /**
   * What is left of `limit` as far as this process knows, in fractions of a unit: the count's
   * remainder, what leaked since, and its own share.
   */
  #peek(keyId: number, limit: Limit): number {
    const share = this.#shares.get(keyId)?.get(limit.bucket);
    if (!share || !Number.isFinite(share.remaining)) return limit.capacity;
    const leaked = (limit.leakPerSecond * (Date.now() - share.takenAt)) / 1000;
    return Math.max(0, Math.min(limit.capacity, share.remaining + leaked + Math.max(0, share.local)));
  }

  /** Dollars per token of each hosted model, from the price table. */
  async #pricePerToken(model: string): Promise<number> {
    if (!this.#prices || Date.now() - this.#prices.at > PRICES_TTL_MS) {
      const byModel = this.#db('prices')
        .where({ resource_kind: 'hosted_model' })
        .select('instance_type', 'unit_amount_decimal')
        .then((rows: Array<{ instance_type: string; unit_amount_decimal: string }>) => new Map(rows.map((row) => [row.instance_type, Number(row.unit_amount_decimal)])));
      this.#prices = { at: Date.now(), byModel };
      byModel.catch(() => (this.#prices = undefined));
    }
    return (await this.#prices.byModel).get(model) ?? 0;
  }
}

/** A new month's share replaces the last month's of the same kind. */
function forgetOldMonths(shares: Map<string, Share>, bucket: string): void {
  const kind = bucket.split(':')[0];
  if (!kind?.startsWith('monthly_')) return;
  for (const name of shares.keys()) if (name.startsWith(`${kind}:`)) shares.delete(name);
}

/** A share of a per-minute limit not used within its time is dropped. */
function expired(limit: Limit, share: Share, now: number): boolean {
  return limit.leakPerSecond > 0 && share.local > 0 && now - share.takenAt > MINUTE_SHARE_TTL_MS;
}

/** The share has a unit for one more request, now. */
function holdsUnit(limit: Limit, share: Share, now: number): boolean {
  return share.local >= 1 && !expired(limit, share, now);
}

/** The key's limits as buckets; monthly budgets first (they refuse for longest). */
function limitsOf(limits: EffectiveLimits, month: { name: string; endsAt: number }): Limit[] {
  const result: Limit[] = [];
  if (limits.monthlySpendMicros !== null) result.push({ kind: 'monthly_spend', bucket: `monthly_spend:${month.name}`, capacity: limits.monthlySpendMicros, leakPerSecond: 0, endsAt: month.endsAt });
  if (limits.monthlyTokens !== null) result.push({ kind: 'monthly_tokens', bucket: `monthly_tokens:${month.name}`, capacity: limits.monthlyTokens, leakPerSecond: 0, endsAt: month.endsAt });
  if (limits.requestsPerMinute !== null) result.push({ kind: 'requests', bucket: 'requests', capacity: limits.requestsPerMinute, leakPerSecond: limits.requestsPerMinute / 60 });
  if (limits.tokensPerMinute !== null) result.push({ kind: 'tokens', bucket: 'tokens', capacity: limits.tokensPerMinute, leakPerSecond: limits.tokensPerMinute / 60 });
  return result;
}

/**
 * OpenAI's `x-ratelimit-*` trios for the per-minute limits, from what is left of each (`leftOf`, in
 * fractions of a unit). `remaining` is the whole units left; `reset` the time until the limit is
 * whole again, or, with nothing remaining, until one more unit has refilled: when the next request
 * would be admitted, the wait a 429 gives in `Retry-After`.
 */
function headersOf(limits: readonly Limit[], leftOf: (limit: Limit) => number): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const limit of limits) {
    if (limit.kind !== 'requests' && limit.kind !== 'tokens') continue;
    const left = leftOf(limit);
    const remaining = Math.floor(left);
    const missing = remaining >= 1 ? limit.capacity - left : 1 - left;
    headers[`x-ratelimit-limit-${limit.kind}`] = String(limit.capacity);
    headers[`x-ratelimit-remaining-${limit.kind}`] = String(remaining);
    headers[`x-ratelimit-reset-${limit.kind}`] = formatResetDuration((missing / limit.leakPerSecond) * 1000);
  }
  return headers;
}

function refusal(limit: Limit, share: Share, headers: Record<string, string>, now: number): AppError {
  if (limit.endsAt !== undefined) {
    const seconds = Math.max(1, Math.ceil((limit.endsAt - now) / 1000));
    const what = limit.kind === 'monthly_spend' ? 'spend' : 'token';
    return new AppError('RATE_LIMITED', `This API key has used its monthly ${what} budget; it renews at the start of next month (UTC), or an admin raises it.`, {
      headers: { ...headers, 'Retry-After': String(seconds), 'x-should-retry': 'false' },
      inference: { code: 'insufficient_quota' },
    });
  }
  // Until enough has leaked for one more unit (what is owed paid off first); the limit's reset
  // header says the same wait.
  const missing = Math.max(1 - share.remaining, 0.001);
  const waitMs = Math.max(1, Math.ceil((missing / limit.leakPerSecond) * 1000));
  return new AppError('RATE_LIMITED', `This API key is over its limit of ${limit.capacity} ${limit.kind} per minute. Retry after ${Math.ceil(waitMs / 1000)} seconds.`, {
    headers: {
      ...headers,
      [`x-ratelimit-reset-${limit.kind}`]: formatResetDuration(waitMs),
      'Retry-After': String(Math.ceil(waitMs / 1000)),
      'retry-after-ms': String(waitMs),
    },
    inference: { code: 'rate_limit_exceeded' },
  });
}
