import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { ApiKeyPrincipal } from '../principal.ts';
import { calendarMonth, formatResetDuration } from '../api-keys/key-limits.ts';
import type { EffectiveLimits } from '../principal.ts';
import { AppError } from '../errors.ts';
import { hostedTokenPrices } from '../metering/metering.repository.ts';

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

/** The hosted models' prices per token, as read (`known` once the read is done). */
interface Prices {
  at: number;
  byModel: Promise<Map<string, number>>;
  known?: Map<string, number>;
}

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

/**
 * The most a request can cost, reserved against the key's limits before it is forwarded: its
 * prompt's estimate plus the completion it may generate (`max_tokens`, at most the model's context),
 * and for a hosted model their price.
 */
export interface Cost {
  tokens: number;
  /** The hosted model's name (priced per token); null for a deployment of the organization (billed by GPU time). */
  hostedModel: string | null;
}

/** An admitted request: what it reserved of each limit, settled once its usage is known. */
export interface Admission {
  keyId: number;
  limits: readonly Limit[];
  /** Units reserved of each of `limits`, in its order. */
  reserved: number[];
  /** The request's cost as reserved; its settled usage is counted against the same hosted model. */
  cost: Cost;
  settled: boolean;
}

/**
 * Per-key limits of the inference proxy (requests and tokens per minute, monthly token and spend
 * budgets), correct across processes on one Postgres with no database write per request: each
 * process takes shares of a limit from a count in Postgres (`take_from_api_key_bucket`, under the
 * row's lock) and admits requests from its share in memory. Each request reserves the most it can
 * cost before it is forwarded; `settle` replaces that with what it used. With N processes, requests
 * stay within the bucket plus N shares, and a budget is overshot by at most one reservation per
 * process. A key with no limit costs nothing here. Shares, reservations, bounds: docs/limits.md.
 */
export class KeyLimiter {
  readonly #db: Knex;
  readonly #log: Logger;
  /** Per key, its shares by bucket. */
  readonly #shares = new Map<number, Map<string, Share>>();
  #prices: Prices | undefined;
  /** Each cached key state's limits as buckets, until the month ends. */
  readonly #buckets = new WeakMap<EffectiveLimits, { until: number; limits: Limit[] }>();

  constructor(db: Knex, log: Logger) {
    this.#db = db;
    this.#log = log;
  }

  /**
   * Admits a request of the key, reserving `cost` (see `Cost`), or throws 429
   * (`rate_limit_exceeded` with the wait, or `insufficient_quota` for a budget used up); the
   * `x-ratelimit-*` headers for the answer go in `headers`. Undefined when nothing limits the key.
   * While this process's shares hold the reservation, it answers at once (no promise); it waits only
   * for a take from the shared counts (or the hosted prices, read once a minute).
   */
  admit(principal: ApiKeyPrincipal, headers: Record<string, string>, cost: Cost): Admission | undefined | Promise<Admission> {
    const { limits: effective } = principal;
    if (!effective) return undefined;
    const now = Date.now();
    const limits = this.#limitsOf(effective, now);
    const price = this.#pricePerTokenNow(cost.hostedModel, limits);
    if (price === undefined) return this.#pricePerToken(cost.hostedModel as string).then(() => this.admit(principal, headers, cost) as Admission | Promise<Admission>);
    const reserved = limits.map((limit) => reservationOf(limit, cost, price));
    const shares = limits.map((limit) => this.#share(principal.keyId, limit));
    if (!limits.every((limit, i) => holds(limit, shares[i] as Share, Math.max(1, reserved[i] as number), now))) {
      return this.#admitAfterTakes(principal.keyId, limits, reserved, cost, headers, now);
    }
    shares.forEach((share, i) => (share.local -= reserved[i] as number));
    Object.assign(headers, headersOf(limits, (limit) => this.#peek(principal.keyId, limit)));
    return { keyId: principal.keyId, limits, reserved, cost, settled: false };
  }

  async #admitAfterTakes(keyId: number, limits: readonly Limit[], reserved: number[], cost: Cost, headers: Record<string, string>, now: number): Promise<Admission> {
    const claimed: Array<{ share: Share; units: number }> = [];
    for (const [i, limit] of limits.entries()) {
      const units = reserved[i] as number;
      const share = await this.#claim(keyId, limit, units, now);
      if (!share) {
        // What was reserved of the other limits is given back: this request is not made.
        for (const claim of claimed) claim.share.local += claim.units;
        throw refusal(limit, this.#share(keyId, limit), headersOf(limits, (l) => this.#peek(keyId, l)), now);
      }
      claimed.push({ share, units });
    }
    Object.assign(headers, headersOf(limits, (limit) => this.#peek(keyId, limit)));
    return { keyId, limits, reserved, cost, settled: false };
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
   * Replaces an admitted request's reservation with what it used once it ended (`tokens`: 0 for a
   * request that failed or is not metered in tokens; counted against the cost's hosted model, if
   * any). Once per admission. What is owed beyond this process's share is paid, and what a share
   * holds beyond its usual size is given back, in the background.
   */
  settle(admission: Admission | undefined, tokens: number): void {
    if (!admission || admission.settled) return;
    admission.settled = true;
    void this.#settle(admission, tokens).catch((error: unknown) => this.#log.error({ err: error, api_key_id: admission.keyId }, 'key limit usage could not be counted'));
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

  async #settle(admission: Admission, tokens: number): Promise<void> {
    const price = admission.cost.hostedModel ? await this.#pricePerToken(admission.cost.hostedModel) : 0;
    for (const [i, limit] of admission.limits.entries()) {
      const used = limit.kind === 'requests' ? 1 : reservationOf(limit, { ...admission.cost, tokens }, price);
      const share = this.#share(admission.keyId, limit);
      share.local += (admission.reserved[i] as number) - used;
      // Owed units are paid at once, so the other processes see them within a round trip.
      if (share.local < 0) {
        await this.#refill(admission.keyId, limit, share, 0);
        continue;
      }
      // The share keeps one more request's reservation beyond its usual size, so that requests that
      // reserve more than a share go on without a take each; the rest goes back to the count.
      const size = shareSize(limit);
      const reserved = admission.reserved[i] as number;
      const excess = Math.floor(share.local - size - (reserved > size ? reserved : 0));
      if (excess >= 1) {
        share.local -= excess;
        this.#giveBack(admission.keyId, limit, excess);
      }
    }
  }

  /** Returns units this process holds but will not use to the shared count, for the other processes. */
  #giveBack(keyId: number, limit: Limit, units: number): void {
    void this.#take(keyId, limit, 0, -units).catch((error: unknown) => this.#log.warn({ err: error, api_key_id: keyId }, 'key limit units could not be given back'));
  }

  /**
   * The share of `limit` once it holds `units` for this request, taken from it (refilled from the
   * shared count, one take at a time per share); or, when the count cannot cover them, still while
   * the share holds a unit (the count then owes the rest); undefined when nothing is left.
   */
  async #claim(keyId: number, limit: Limit, units: number, now: number): Promise<Share | undefined> {
    const share = this.#share(keyId, limit);
    if (expired(limit, share, now)) {
      // The count has forgotten about a share's worth since: a share is dropped, more (a
      // reservation given back) goes back.
      const unused = Math.floor(share.local);
      share.local = 0;
      if (unused > shareSize(limit)) this.#giveBack(keyId, limit, unused);
    }
    const needed = Math.max(1, units);
    // Requests that waited on one take may find it used up by the others: they take again, until
    // the shared count has nothing left. Checked and claimed with no await in between.
    while (share.local < needed) if ((await this.#refill(keyId, limit, share, needed - share.local)) === 0) break;
    if (share.local < 1) return undefined;
    share.local -= units;
    return share;
  }

  /**
   * Takes a share (and `wanted` units more when they are more than a share) from the shared count, paying what is owed; resolves
   * with the units granted. What is owed moves to the count when the take starts, so usage settled
   * meanwhile is counted once.
   */
  #refill(keyId: number, limit: Limit, share: Share, wanted: number): Promise<number> {
    share.pending ??= (async () => {
      const owed = Math.max(0, -share.local);
      share.local += owed;
      try {
        // A request that reserves more than a share takes its reservation and a share more.
        const size = shareSize(limit);
        const taken = await this.#take(keyId, limit, wanted > size ? Math.ceil(wanted) + size : size, owed);
        share.local += taken.granted;
        share.remaining = taken.remaining;
        share.takenAt = Date.now();
        return taken.granted;
      } catch (error) {
        share.local -= owed;
        throw error;
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

  /**
   * Dollars per token of the hosted model as this process knows them now: 0 when nothing prices the
   * request (not a hosted model, or no spend budget), undefined when the prices must be read first.
   */
  #pricePerTokenNow(model: string | null, limits: readonly Limit[]): number | undefined {
    if (!model || !limits.some((limit) => limit.kind === 'monthly_spend')) return 0;
    const prices = this.#prices;
    if (!prices?.known || Date.now() - prices.at > PRICES_TTL_MS) return undefined;
    return prices.known.get(model) ?? 0;
  }

  /** Dollars per token of each hosted model, from the price table. */
  async #pricePerToken(model: string): Promise<number> {
    if (!this.#prices || Date.now() - this.#prices.at > PRICES_TTL_MS) {
      const byModel = hostedTokenPrices(this.#db);
      const prices: Prices = { at: Date.now(), byModel };
      this.#prices = prices;
      byModel.then(
        (known) => (prices.known = known),
        () => (this.#prices = undefined),
      );
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

/** The share holds `units` for one more request, now. */
function holds(limit: Limit, share: Share, units: number, now: number): boolean {
  return share.local >= units && !expired(limit, share, now);
}

/** The units a process takes of `limit` at a time: a twentieth of a per-minute limit, a thousandth of a monthly budget, at least 1. */
function shareSize(limit: Limit): number {
  return Math.max(1, Math.floor(limit.capacity * (limit.leakPerSecond > 0 ? MINUTE_SHARE : MONTH_SHARE)));
}

/** The units of `limit` a request of `cost` takes (a spend budget counts millionths of a dollar of hosted tokens). */
function reservationOf(limit: Limit, cost: Cost, pricePerToken: number): number {
  if (limit.kind === 'requests') return 1;
  if (limit.kind === 'monthly_spend') return cost.hostedModel ? cost.tokens * pricePerToken * 1_000_000 : 0;
  return cost.tokens;
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

/** The longest `retry-after-ms` the openai SDKs wait out (openai-node's `retryRequest`: 60 s). */
const SDK_LONGEST_RETRY_WAIT_MS = 60_000;

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
      // The official SDKs sleep a wait of up to a minute and retry; past that they retry on their
      // own backoff of a second or two, certain to be refused again: told not to.
      ...(waitMs > SDK_LONGEST_RETRY_WAIT_MS ? { 'x-should-retry': 'false' } : {}),
    },
    inference: { code: 'rate_limit_exceeded' },
  });
}
