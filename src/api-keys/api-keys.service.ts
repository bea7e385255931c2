import type { Knex } from 'knex';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import type { components } from '../../generated/api.d.ts';
import { requireOrganization, requireVerifiedEmail, type ApiKeyPrincipal, type SessionPrincipal } from '../principal.ts';
import { constantTimeEqual, hashToken } from '../crypto.ts';
import { AppError, type InferenceErrorCode } from '../errors.ts';
import { notBlank } from '../validation.ts';
import { announceChange, CHANGE_CHANNELS } from '../db/change-listener.ts';
import { effectiveLimits, limitChanges, NO_LIMITS, toApiLimits, type ApiKeyLimits, type LimitColumns } from './key-limits.ts';
import {
  findKey,
  findKeyState,
  findLimitDefaults,
  saveLimitDefaults,
  insertKey,
  findKeyViews,
  type ApiKeyView,
  listKeysOf,
  revokeKey,
  deploymentOptionChanges,
  scopableDeployments,
  scopesInOrganization,
  scopesOf,
  type ScopedDeployment,
  scopeSize,
  setScope,
  touchKey,
  updateKey,
} from './api-keys.repository.ts';
import { generateKey, isWellFormedKey, keyPrefixOf } from './key-format.ts';
import { OrganizationListCache } from '../organizations/list-cache.ts';
import { keySeries } from '../metrics/metric-series.ts';
import type { MetricsQuery } from '../metrics/metrics-window.ts';

type ApiKey = components['schemas']['ApiKey'];
type CreateApiKeyRequest = components['schemas']['CreateApiKeyRequest'];
type UpdateApiKeyRequest = components['schemas']['UpdateApiKeyRequest'];
type ApiKeyDeployment = components['schemas']['ApiKeyDeployment'];
type ApiKeyUsage = components['schemas']['ApiKeyUsage'];

/**
 * How long a key's state (valid, disabled, revoked, expired) is trusted without a lookup, in this
 * process: the fallback bound (DESIGN.md §3) for when a change notification is lost.
 */
const CACHE_MS = 1_000;
/** Keys whose state is cached at most; the least recently used goes first. Unknown keys are never cached. */
const CACHE_MAX_ENTRIES = 10_000;
/** Unknown or malformed keys a client address may send per window before its key authentications answer 429. */
export const FAILED_KEY_LIMIT = { points: 20, windowSeconds: 60 };
/** The payload of an `api_key_changed` announcement that concerns every key (an organization's defaults changed). */
export const ALL_KEYS = '*';
/** `last_used_at` is written at most this often per key. */
const LAST_USED_EVERY_MS = 60_000;

const refused = (code: InferenceErrorCode, message: string) => new AppError('UNAUTHENTICATED', message, { inference: { code } });

interface CacheEntry {
  at: number;
  principal?: ApiKeyPrincipal;
  /** Why a known key is refused (`api_key_revoked`, …). */
  refusal?: { code: InferenceErrorCode; message: string };
}

/**
 * API keys of an organization: created with their secret shown once, scoped to deployments,
 * disabled, re-enabled, revoked. Authentication is one lookup by the key's hash, cached per process
 * for known keys only. A change is announced in its transaction (`api_key_changed`), so every
 * process drops the key on commit; a cached state is trusted 1 second at most. Unknown keys are
 * throttled per client address in memory. Sizes and limits: docs/decisions/2026-11-21-api-keys.md.
 */
export class ApiKeysService {
  readonly #db: Knex;
  readonly #cache = new Map<string, CacheEntry>();
  /** Lookups under way, by key hash: the requests that miss the cache together share one query. */
  readonly #lookups = new Map<string, Promise<CacheEntry | undefined>>();
  /** Bumped by every change made here: a lookup that started before it is not cached. */
  #changes = 0;
  readonly #lastUsedWrites = new Map<number, number>();
  readonly #failures = new RateLimiterMemory({ points: FAILED_KEY_LIMIT.points, duration: FAILED_KEY_LIMIT.windowSeconds });

  readonly #lists: OrganizationListCache;

  /** `lists` keeps an organization's large lists between its changes; by default none is kept. */
  constructor(db: Knex, lists = new OrganizationListCache(db, { minItems: Infinity })) {
    this.#db = db;
    this.#lists = lists;
  }

  /** The organization's keys, newest first, each with its scope: two indexed reads, whatever the number of keys. */
  async list(principal: SessionPrincipal): Promise<{ items: ApiKey[] }> {
    const organizationId = requireOrganization(principal).id;
    return this.#lists.get(organizationId, 'api-keys', async () => {
      const [rows, scopes] = await Promise.all([listKeysOf(this.#db, organizationId), scopesInOrganization(this.#db, organizationId)]);
      // A key's use changes no list version (see 20261126100000): `last_used_at` may be a minute older than stored.
      return { body: { items: toApiKeys(rows, scopes) }, size: rows.length, validUntil: Date.now() + LAST_USED_EVERY_MS };
    });
  }

  async create(principal: SessionPrincipal, input: CreateApiKeyRequest): Promise<{ key: string; api_key: ApiKey }> {
    const organization = requireOrganization(principal);
    requireVerifiedEmail(principal, 'create API keys');
    const name = notBlank(input.name, 'body/name');
    const expiresAt = futureOrNull(input.expires_at);
    const key = generateKey();
    assertCallsSomething(input.deployment_ids.length, input.allow_hosted_models ?? false, 'body/deployment_ids');
    return this.#db.transaction(async (trx) => {
      await assertScope(trx, organization.id, input.deployment_ids);
      const created = await insertKey(trx, {
        organization_id: organization.id,
        created_by_user_id: principal.user.id,
        name,
        key_prefix: keyPrefixOf(key),
        key_hash: hashToken(key),
        expires_at: expiresAt,
        allow_hosted_models: input.allow_hosted_models ?? false,
        ...limitChanges(input.limits),
      });
      await setScope(trx, created.id, input.deployment_ids, { replace: false });
      return { key, api_key: await this.#read(created.id, trx) };
    });
  }

  async deploymentOptions(principal: SessionPrincipal): Promise<{ items: ApiKeyDeployment[] }> {
    const organizationId = requireOrganization(principal).id;
    const answer = (items: ApiKeyDeployment[]) => ({ body: { items }, size: items.length });
    return this.#lists.get(
      organizationId,
      'deployment-options',
      async () => answer(await scopableDeployments(this.#db, organizationId)),
      // Under churn (a status change between most reads), only the deployments that changed are read.
      async (kept, from, to) => {
        const changes = await deploymentOptionChanges(this.#db, organizationId, from, to);
        if (!changes) return undefined;
        const keptIds = new Set(kept.items.map((item) => item.id));
        // A deployment the kept list lacks has no place in it yet (joins are logged as "read whole").
        if ([...changes].some(([id, changed]) => changed && !keptIds.has(id))) return undefined;
        const items = kept.items.flatMap((item) => {
          const changed = changes.get(item.id);
          return changed === undefined ? [item] : changed === null ? [] : [changed];
        });
        return answer(items);
      },
    );
  }

  async update(principal: SessionPrincipal, id: number, input: UpdateApiKeyRequest): Promise<ApiKey> {
    const organization = requireOrganization(principal);
    const updated = await this.#db.transaction(async (trx) => {
      const key = await findKey(trx, organization.id, id, { forUpdate: true });
      if (!key) throw new AppError('NOT_FOUND', `API key ${id} was not found.`);
      if (key.status === 'revoked') throw new AppError('API_KEY_REVOKED', 'This key is revoked; revoked keys cannot be changed. Create a new one.');
      const changes: Parameters<typeof updateKey>[2] = {};
      if (input.name !== undefined) changes.name = notBlank(input.name, 'body/name');
      if (input.expires_at !== undefined) changes.expires_at = futureOrNull(input.expires_at);
      if (input.status !== undefined) changes.status = input.status;
      if (input.allow_hosted_models !== undefined) changes.allow_hosted_models = input.allow_hosted_models;
      Object.assign(changes, limitChanges(input.limits));
      if (input.deployment_ids !== undefined || input.allow_hosted_models === false) {
        const scoped = input.deployment_ids?.length ?? (await scopeSize(trx, id));
        assertCallsSomething(scoped, changes.allow_hosted_models ?? key.allow_hosted_models, input.deployment_ids ? 'body/deployment_ids' : 'body/allow_hosted_models');
      }
      if (input.deployment_ids !== undefined) {
        await assertScope(trx, organization.id, input.deployment_ids);
        await setScope(trx, id, input.deployment_ids, { replace: true });
      }
      const row = await updateKey(trx, key, changes);
      await announceChange(trx, CHANGE_CHANNELS.apiKey, id);
      return this.#read(row.id, trx);
    });
    this.forget(id);
    return updated;
  }

  /** The key's request metrics over the query's range (src/metrics/metric-series.ts); 404 when it is not the organization's. */
  async usage(principal: SessionPrincipal, id: number, query: MetricsQuery): Promise<ApiKeyUsage> {
    const key = await findKey(this.#db, requireOrganization(principal).id, id);
    if (!key) throw new AppError('NOT_FOUND', `API key ${id} was not found.`);
    return { api_key_id: key.id, ...(await keySeries(this.#db, key.id, query)) };
  }

  /** Revokes for good; revoking a revoked key returns it unchanged. */
  async revoke(principal: SessionPrincipal, id: number): Promise<ApiKey> {
    const organization = requireOrganization(principal);
    const row = await this.#db.transaction(async (trx) => {
      const revoked = await revokeKey(trx, organization.id, id);
      if (revoked) await announceChange(trx, CHANGE_CHANNELS.apiKey, id);
      return revoked;
    });
    if (!row) throw new AppError('NOT_FOUND', `API key ${id} was not found.`);
    this.forget(id);
    return this.#read(row.id);
  }

  /** The organization's default key limits (all `null` until an admin sets them). */
  async limitDefaults(principal: SessionPrincipal): Promise<ApiKeyLimits> {
    const row = await findLimitDefaults(this.#db, requireOrganization(principal).id);
    return row ? toApiLimits(row) : NO_LIMITS;
  }

  /** Replaces the organization's default key limits; every process drops its cached keys on commit. */
  async setLimitDefaults(principal: SessionPrincipal, limits: ApiKeyLimits): Promise<ApiKeyLimits> {
    const organization = requireOrganization(principal);
    const row = await this.#db.transaction(async (trx) => {
      const saved = await saveLimitDefaults(trx, organization.id, limitChanges(limits) as LimitColumns);
      await announceChange(trx, CHANGE_CHANNELS.apiKey, ALL_KEYS);
      return saved;
    });
    this.forgetAll();
    return toApiLimits(row);
  }

  /**
   * The caller a bearer key names, or a 401 saying why not. `clientAddress` is where the request
   * came from: only keys that fail count against it, and once it sent too many unknown or
   * malformed keys its failing keys answer 429 instead of 401. A valid key always passes, so one
   * client behind a shared address never locks out its neighbours.
   */
  async authenticate(key: string, clientAddress = 'unknown'): Promise<ApiKeyPrincipal> {
    if (!isWellFormedKey(key)) {
      await this.#countFailure(clientAddress);
      throw refused('invalid_api_key', 'The API key is malformed. Keys look like svc-sk-… as shown when they were created.');
    }
    const hash = hashToken(key);
    const now = Date.now();
    let entry = this.#cache.get(hash);
    if (entry && now - entry.at <= CACHE_MS) {
      // Most recently used last: Map keeps insertion order.
      this.#cache.delete(hash);
      this.#cache.set(hash, entry);
    } else {
      this.#cache.delete(hash);
      entry = await this.#sharedLookup(hash, now);
      if (!entry) {
        await this.#countFailure(clientAddress);
        throw refused('invalid_api_key', 'The API key is not valid.');
      }
    }
    if (entry.refusal) throw refused(entry.refusal.code, entry.refusal.message);
    const principal = entry.principal as ApiKeyPrincipal;
    this.#touch(principal.keyId, now);
    return principal;
  }

  /** Counts a failing key against its address; past the limit, the failure answers 429 instead of 401. */
  async #countFailure(clientAddress: string): Promise<void> {
    const failures = await this.#failures.consume(clientAddress).catch((limited: unknown) => {
      if (limited instanceof RateLimiterRes) return limited;
      throw limited;
    });
    if (failures.consumedPoints <= FAILED_KEY_LIMIT.points) return;
    const retryAfter = Math.max(1, Math.ceil(failures.msBeforeNext / 1000));
    throw new AppError('RATE_LIMITED', `Too many invalid API keys from this address. Try again in ${retryAfter} seconds.`, {
      headers: { 'Retry-After': String(retryAfter) },
      inference: { code: 'too_many_invalid_api_keys' },
    });
  }

  /** How many keys' states are cached in this process (for tests and metrics). */
  get cacheSize(): number {
    return this.#cache.size;
  }

  #remember(hash: string, entry: CacheEntry): void {
    this.#cache.set(hash, entry);
    while (this.#cache.size > CACHE_MAX_ENTRIES) {
      const oldest = this.#cache.keys().next().value as string;
      this.#cache.delete(oldest);
    }
  }

  /** The key's state looked up once for every request that asks while the query runs, and cached when known. */
  #sharedLookup(hash: string, now: number): Promise<CacheEntry | undefined> {
    let pending = this.#lookups.get(hash);
    if (!pending) {
      const changes = this.#changes;
      pending = this.#lookup(hash)
        .then((entry) => {
          if (entry && changes === this.#changes) this.#remember(hash, { ...entry, at: now });
          return entry;
        })
        .finally(() => this.#lookups.delete(hash));
      this.#lookups.set(hash, pending);
    }
    return pending;
  }

  /** The key's state, or undefined when no key has this hash. */
  async #lookup(hash: string): Promise<CacheEntry | undefined> {
    const row = await findKeyState(this.#db, hash);
    if (!row || !constantTimeEqual(row.key_hash, hash)) return undefined;
    const principal: ApiKeyPrincipal = {
      kind: 'apiKey',
      keyId: row.id,
      organizationId: row.organization_id,
      deploymentIds: new Set(row.deployment_ids),
      allowHostedModels: row.allow_hosted_models,
      limits: effectiveLimits(row.own, row.defaults ?? undefined),
    };
    if (row.status === 'revoked') return { at: 0, principal, refusal: { code: 'api_key_revoked', message: 'The API key was revoked.' } };
    if (row.status === 'disabled') return { at: 0, principal, refusal: { code: 'api_key_disabled', message: 'The API key is disabled.' } };
    if (row.expires_at && row.expires_at.getTime() <= Date.now()) return { at: 0, principal, refusal: { code: 'api_key_expired', message: 'The API key has expired.' } };
    return { at: 0, principal };
  }

  /** Records use at most once a minute per key, off the request's path. */
  #touch(keyId: number, now: number): void {
    if (now - (this.#lastUsedWrites.get(keyId) ?? 0) < LAST_USED_EVERY_MS) return;
    this.#lastUsedWrites.set(keyId, now);
    void touchKey(this.#db, keyId).catch(() => this.#lastUsedWrites.delete(keyId));
  }

  /** Drops what this process cached of the key (a change here, or announced by another process). */
  forget(keyId: number): void {
    this.#changes++;
    for (const [hash, entry] of this.#cache) if (entry.principal?.keyId === keyId) this.#cache.delete(hash);
  }

  /** Drops every cached key (change notifications may have been missed). */
  forgetAll(): void {
    this.#changes++;
    this.#cache.clear();
  }

  /** The key as the API shows it, read again (in the caller's transaction when given). */
  async #read(id: number, db: Knex | Knex.Transaction = this.#db): Promise<ApiKey> {
    const [views, scopes] = await Promise.all([findKeyViews(db, [id]), scopesOf(db, [id])]);
    const [apiKey] = toApiKeys(views, scopes);
    if (!apiKey) throw new Error(`API key ${id} was not found after it was written`);
    return apiKey;
  }
}

/** Keys as the API shows them, each with the deployments of `scopes` that are its own (in their order). */
function toApiKeys(rows: readonly ApiKeyView[], scopes: ReadonlyArray<ScopedDeployment & { api_key_id: number }>): ApiKey[] {
  const scopeOf = Map.groupBy(scopes, (scope) => scope.api_key_id);
  return rows.map((row) => ({
    id: row.id,
    organization_id: row.organization_id,
    created_by_user_id: row.created_by_user_id,
    name: row.name,
    key_prefix: row.key_prefix,
    status: row.status,
    expires_at: row.expires_at,
    last_used_at: row.last_used_at,
    revoked_at: row.revoked_at,
    deployments: (scopeOf.get(row.id) ?? []).map(({ id, model_name, status }) => ({ id, model_name, status })),
    allow_hosted_models: row.allow_hosted_models,
    limits: toApiLimits(row),
    created_at: row.created_at,
  }));
}

/** A key scoped to no deployment must be allowed the hosted models: otherwise it could call nothing. */
function assertCallsSomething(scopedDeployments: number, allowHostedModels: boolean, location: string): void {
  if (scopedDeployments === 0 && !allowHostedModels) {
    throw new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', {
      errors: [{ location, message: 'a key scoped to no deployment must allow the hosted models (allow_hosted_models: true); otherwise it could call nothing' }],
    });
  }
}

/** Every scoped deployment must belong to the organization and not be terminated. */
async function assertScope(trx: Knex.Transaction, organizationId: number, deploymentIds: readonly string[]): Promise<void> {
  const found = await scopableDeployments(trx, organizationId, deploymentIds);
  const known = new Set(found.map((row) => row.id));
  const unknown = deploymentIds.filter((id) => !known.has(id));
  if (unknown.length) {
    throw new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', {
      errors: unknown.map((id) => ({ location: 'body/deployment_ids', message: `${id} is not a deployment of your organization that can be called` })),
    });
  }
}

function futureOrNull(expiresAt: string | null | undefined): Date | null {
  if (expiresAt === undefined || expiresAt === null) return null;
  const date = new Date(expiresAt);
  if (date.getTime() <= Date.now()) {
    throw new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', {
      errors: [{ location: 'body/expires_at', message: 'must be in the future' }],
    });
  }
  return date;
}
