import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { SimulatorError } from './http.ts';

/**
 * Xinference 3.x authentication, as the simulator plays it ("advanced" auth, on by default since
 * 3.0; `xinference/constants.py`, `is_auth_advanced`): users with permissions sign in for a JWT
 * access token and a refresh token; API keys (`xf-…`) may only read and list models; every invalid
 * bearer counts toward a ban of the client's address. Each rule names the file it mirrors.
 */

export interface SimulatedUser {
  username: string;
  password: string;
  /** Xinference permission scopes, e.g. `admin`, `models:write`. */
  permissions: string[];
  /** The account must set a new password before anything else (`auth_service.py`, `must_change_password`). */
  mustChangePassword?: boolean;
}

export interface SimulatedApiKey {
  key: string;
  /** The username of the key's owner. */
  owner: string;
  /** Which models the key may call; `all` when none are given (`auth_service.py`, `create_api_key_for_user`). */
  modelPermissions?: ModelPermission[];
  /** When the key stops working (`expires_at`); never when unset. */
  expiresAt?: number;
}

/** `api/oauth2/advanced/cache.py`, `ModelPermission`: every model, one model uid, or one model type (`LLM`, `embedding`, …). */
export type ModelPermission = { permission_type: 'all'; permission_value: null } | { permission_type: 'model_id' | 'model_type'; permission_value: string };

const ALL_MODELS: ModelPermission[] = [{ permission_type: 'all', permission_value: null }];

export interface SimulatorAuthOptions {
  users?: SimulatedUser[];
  apiKeys?: SimulatedApiKey[];
  /** Access-token lifetime (XINFERENCE_ACCESS_TOKEN_EXPIRE_MINUTES, 30 minutes by default); short ones for tests. */
  accessTokenExpireSeconds?: number;
  /** The address ban (XINFERENCE_RATE_LIMIT_IP_*: 10 failures in 300 s ban for 3600 s). */
  ban?: { maxFailures?: number; windowSeconds?: number; banSeconds?: number };
  /** The (address, key) ban (XINFERENCE_RATE_LIMIT_KEY_*: 5 uses of a disabled or expired key in 300 s ban it for 3600 s). */
  keyBan?: { maxFailures?: number; windowSeconds?: number; banSeconds?: number };
}

/**
 * The permission set of the account created at initial setup
 * (`api/oauth2/advanced/auth_service.py`, `INITIAL_ADMIN_PERMISSIONS`).
 */
export const ADMIN_PERMISSIONS = [
  'admin',
  'models:list',
  'models:read',
  'models:write',
  'models:register',
  'keys:create',
  'keys:manage',
  'users:manage',
  'cache:list',
  'cache:delete',
  'virtualenv:list',
  'virtualenv:delete',
  'logs:list',
  'monitor:view',
  'routers:list',
  'routers:read',
  'routers:write',
  'routers:operate',
];

/** What an API key may do, whatever its owner may (`auth_service.py`, `_API_KEY_ALLOWED_SCOPES`). */
const API_KEY_SCOPES = new Set(['models:read', 'models:list']);
/** `auth_service.py`, `REFRESH_TOKEN_EXPIRE_DAYS`. */
const REFRESH_TOKEN_LIFETIME_MS = 7 * 24 * 3600 * 1000;

interface User extends SimulatedUser {
  id: number;
  enabled: boolean;
  /** Bumped by a password reset: every access token issued before is refused. */
  tokenVersion: number;
}

interface FailureRecord {
  timestamps: number[];
  bannedUntil: number;
}

export interface Principal {
  username: string;
  kind: 'user' | 'api_key';
}

export class SimulatedAuth {
  readonly #secret = randomBytes(32);
  readonly #users = new Map<string, User>();
  readonly #keys = new Map<string, { owner: string; enabled: boolean; modelPermissions: ModelPermission[]; expiresAt: number | undefined }>();
  readonly #refreshTokens = new Map<string, { userId: number; expiresAt: number }>();
  readonly #failures = new Map<string, FailureRecord>();
  readonly #expireSeconds: number;
  readonly #ban: { maxFailures: number; windowMs: number; banMs: number };
  readonly #keyBan: { maxFailures: number; windowMs: number; banMs: number };
  /** Failures of a disabled or expired key, by `<address> <key>` (`rate_limiter.py`, `record_key_failure`). */
  readonly #keyFailures = new Map<string, FailureRecord>();
  /** Invalid bearers recorded toward the ban, over the simulator's life. */
  invalidBearers = 0;
  /** Requests answered 401, 403 or 429 by the auth check, over the simulator's life. */
  refusals = { 401: 0, 403: 0, 429: 0 };

  constructor(options: SimulatorAuthOptions) {
    this.#expireSeconds = Math.max(1, Math.floor(options.accessTokenExpireSeconds ?? 30 * 60));
    this.#ban = {
      maxFailures: options.ban?.maxFailures ?? 10,
      windowMs: (options.ban?.windowSeconds ?? 300) * 1000,
      banMs: (options.ban?.banSeconds ?? 3600) * 1000,
    };
    this.#keyBan = {
      maxFailures: options.keyBan?.maxFailures ?? 5,
      windowMs: (options.keyBan?.windowSeconds ?? 300) * 1000,
      banMs: (options.keyBan?.banSeconds ?? 3600) * 1000,
    };
    let id = 0;
    for (const user of options.users ?? []) this.#users.set(user.username, { ...user, permissions: [...user.permissions], id: ++id, enabled: true, tokenVersion: 0 });
    for (const key of options.apiKeys ?? []) {
      this.addApiKey(key.key, key.owner, key.modelPermissions);
      if (key.expiresAt !== undefined) this.expireApiKey(key.key, key.expiresAt);
    }
  }

  /** `POST /token` (`api/oauth2/advanced/routes.py`, `advanced_login`; `auth_service.py`, `login`). */
  login(username: unknown, password: unknown): Record<string, unknown> {
    const user = typeof username === 'string' ? this.#users.get(username) : undefined;
    if (!user || !user.enabled || password !== user.password) {
      throw new SimulatorError(401, 'Incorrect username or password', { 'www-authenticate': 'Bearer' });
    }
    // `auth_service.py`, `login`: the flag rides along with working tokens, which every route but
    // the password change then refuses.
    return {
      access_token: this.#accessToken(user),
      refresh_token: this.#refreshToken(user),
      token_type: 'bearer',
      ...(user.mustChangePassword ? { must_change_password: true } : {}),
    };
  }

  /** `POST /v1/auth/refresh`: rotates the refresh token (`auth_service.py`, `refresh_access_token`). */
  refresh(refreshToken: unknown): Record<string, unknown> {
    if (typeof refreshToken !== 'string' || !refreshToken) throw new SimulatorError(400, 'refresh_token required');
    const held = this.#refreshTokens.get(refreshToken);
    this.#refreshTokens.delete(refreshToken);
    const user = held && [...this.#users.values()].find((u) => u.id === held.userId);
    if (!held || held.expiresAt < Date.now() || !user || !user.enabled) throw new SimulatorError(401, 'Invalid or expired refresh token');
    return { access_token: this.#accessToken(user), refresh_token: this.#refreshToken(user), token_type: 'bearer' };
  }

  /** `POST /v1/auth/logout`. */
  logout(refreshToken: unknown): void {
    if (typeof refreshToken === 'string') this.#refreshTokens.delete(refreshToken);
  }

  /**
   * The `Security(auth, scopes=[...])` dependency (`auth_service.py`, `AdvancedAuthService.__call__`),
   * in its order: a banned address gets 429 first; no bearer is 401 (not counted); an API key may
   * only hold `models:read`/`models:list` (403 otherwise); an unknown `xf-`/`sk-` key or an invalid,
   * expired or revoked JWT is 401 and counts toward the ban; a user's JWT passes with `admin`, or
   * with every scope of the route among the user's current permissions (403 otherwise).
   */
  authenticate(req: IncomingMessage, scopes: readonly string[]): Principal {
    const address = clientAddress(req);
    const challenge = { 'www-authenticate': scopes.length ? `Bearer scope="${scopes.join(' ')}"` : 'Bearer' };
    if (this.#banned(address)) {
      this.refusals[429]++;
      throw new SimulatorError(429, 'Too many failed attempts. IP temporarily banned.');
    }
    const token = bearer(req);
    const unauthenticated = () => {
      this.refusals[401]++;
      return new SimulatorError(401, 'Could not validate credentials', challenge);
    };
    if (!token) throw unauthenticated();

    const key = this.#keys.get(token);
    if (key) {
      // A disabled or expired key counts toward the (address, key) ban, not the address ban.
      const expired = key.expiresAt !== undefined && Date.now() >= key.expiresAt; // expired from its expiry on
      if (!key.enabled || expired) {
        this.#recordKeyFailure(address, token);
        this.refusals[401]++;
        throw new SimulatorError(401, expired ? 'API key has expired' : 'API key is disabled', challenge);
      }
      if (this.#keyBanned(address, token)) {
        this.refusals[429]++;
        throw new SimulatorError(429, 'Too many failed attempts for this key.');
      }
      if (scopes.some((scope) => !API_KEY_SCOPES.has(scope))) {
        this.refusals[403]++;
        throw new SimulatorError(403, 'API keys can only access model query and inference endpoints', challenge);
      }
      // An API key cannot change a password: its owner's flag blocks it outright.
      if (this.#users.get(key.owner)?.mustChangePassword) {
        this.refusals[403]++;
        throw new SimulatorError(403, 'Password change required before using this account.', challenge);
      }
      this.#keyFailures.delete(`${address} ${token}`);
      return { username: key.owner, kind: 'api_key' };
    }
    if (token.startsWith('sk-') || token.startsWith('xf-')) {
      this.#recordInvalid(address);
      throw unauthenticated();
    }
    const payload = this.#verify(token);
    if (!payload) {
      this.#recordInvalid(address);
      throw unauthenticated();
    }
    const user = [...this.#users.values()].find((u) => u.id === payload.user_id);
    if (!user || !user.enabled) throw unauthenticated();
    // Before the admin bypass: a flagged account may only change its own password (not simulated).
    if (user.mustChangePassword) {
      this.refusals[403]++;
      throw new SimulatorError(403, 'Password change required before using this account.', challenge);
    }
    if (payload.scopes.includes('admin')) return { username: user.username, kind: 'user' };
    // Live read: the user's current permissions, not the token's snapshot.
    if (scopes.some((scope) => !user.permissions.includes(scope))) {
      this.refusals[403]++;
      throw new SimulatorError(403, 'Not enough permissions', challenge);
    }
    return { username: user.username, kind: 'user' };
  }

  /** A password reset: every token issued before is refused, refresh tokens included. */
  resetPassword(username: string, password: string): void {
    const user = this.#user(username);
    user.password = password;
    user.tokenVersion++;
    for (const [token, held] of this.#refreshTokens) if (held.userId === user.id) this.#refreshTokens.delete(token);
  }

  setPermissions(username: string, permissions: string[]): void {
    this.#user(username).permissions = [...permissions];
  }

  addUser(user: SimulatedUser): void {
    this.#users.set(user.username, { ...user, permissions: [...user.permissions], id: this.#users.size + 1, enabled: true, tokenVersion: 0 });
  }

  addApiKey(key: string, owner: string, modelPermissions: ModelPermission[] = ALL_MODELS): void {
    this.#keys.set(key, { owner, enabled: true, modelPermissions: modelPermissions.length ? [...modelPermissions] : ALL_MODELS, expiresAt: undefined });
  }

  /**
   * The inference routes' model check, after the scope check and before the model is looked up
   * (`api/restful_api.py`, `_check_model_access`; `auth_service.py`, `validate_model_access`;
   * `cache.py`, `has_model_access`): an API key needs `all`, the model's uid or the route's model
   * type, else 403. A user's token passed the scope check, which is what a user needs.
   */
  checkModelAccess(req: IncomingMessage, modelUid: string, modelType: string): void {
    const key = this.#keys.get(bearer(req) ?? '');
    if (!key) return;
    const allowed = key.modelPermissions.some(
      (p) => p.permission_type === 'all' || (p.permission_type === 'model_id' && p.permission_value === modelUid) || (p.permission_type === 'model_type' && p.permission_value === modelType),
    );
    if (!allowed) {
      this.refusals[403]++;
      throw new SimulatorError(403, `API key does not have access to model: ${modelUid}`);
    }
  }

  /** Disables an API key, or enables it again (`PUT /v1/admin/keys/{id}`): a disabled key answers 401 and counts toward its (address, key) ban. */
  setApiKeyEnabled(key: string, enabled: boolean): void {
    const held = this.#keys.get(key);
    if (!held) throw new Error(`no simulated API key ${key.slice(0, 6)}…`);
    held.enabled = enabled;
  }

  /** Makes an API key expire at `at` (now by default): from then on it answers 401 "API key has expired". */
  expireApiKey(key: string, at = Date.now()): void {
    const held = this.#keys.get(key);
    if (!held) throw new Error(`no simulated API key ${key.slice(0, 6)}…`);
    held.expiresAt = at;
  }

  /** Flags a user for a forced password change (`must_change_password`), or clears the flag. */
  setMustChangePassword(username: string, flag: boolean): void {
    this.#user(username).mustChangePassword = flag;
  }

  /** Deletes an API key: it becomes an unknown `xf-` key, which counts toward the ban. */
  deleteApiKey(key: string): void {
    this.#keys.delete(key);
  }

  /** Addresses banned now. */
  bannedAddresses(): string[] {
    return [...this.#failures.entries()].filter(([address]) => this.#banned(address)).map(([address]) => address);
  }

  #user(username: string): User {
    const user = this.#users.get(username);
    if (!user) throw new Error(`no simulated user ${username}`);
    return user;
  }

  /** `auth_service.py`, `create_access_token`: HS256, `exp` in whole seconds, type `access`. */
  #accessToken(user: User): string {
    const payload = {
      sub: user.username,
      user_id: user.id,
      scopes: user.permissions,
      token_version: user.tokenVersion,
      exp: Math.floor(Date.now() / 1000) + this.#expireSeconds,
      type: 'access',
    };
    const head = `${base64url({ alg: 'HS256', typ: 'JWT' })}.${base64url(payload)}`;
    return `${head}.${createHmac('sha256', this.#secret).update(head).digest('base64url')}`;
  }

  #refreshToken(user: User): string {
    const token = randomBytes(48).toString('base64url');
    this.#refreshTokens.set(token, { userId: user.id, expiresAt: Date.now() + REFRESH_TOKEN_LIFETIME_MS });
    return token;
  }

  /** `auth_service.py`, `verify_access_token`: signature, expiry, type, and the user's token version. */
  #verify(token: string): { user_id: number; scopes: string[] } | undefined {
    const [header, payload, signature] = token.split('.');
    if (!header || !payload || !signature) return undefined;
    const expected = createHmac('sha256', this.#secret).update(`${header}.${payload}`).digest();
    const given = Buffer.from(signature, 'base64url');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
    let claims: { user_id?: unknown; scopes?: unknown; exp?: unknown; type?: unknown; token_version?: unknown };
    try {
      claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as typeof claims;
    } catch {
      return undefined;
    }
    if (claims.type !== 'access' || typeof claims.exp !== 'number' || claims.exp <= Date.now() / 1000) return undefined;
    const user = [...this.#users.values()].find((u) => u.id === claims.user_id);
    if (!user || claims.token_version !== user.tokenVersion) return undefined;
    return { user_id: user.id, scopes: Array.isArray(claims.scopes) ? (claims.scopes as string[]) : [] };
  }

  /** `api/oauth2/advanced/rate_limiter.py`, `is_ip_banned`. */
  #banned(address: string): boolean {
    const record = this.#failures.get(address);
    if (!record?.bannedUntil) return false;
    if (Date.now() < record.bannedUntil) return true;
    this.#failures.delete(address);
    return false;
  }

  /** `rate_limiter.py`, `is_key_banned`. */
  #keyBanned(address: string, key: string): boolean {
    const record = this.#keyFailures.get(`${address} ${key}`);
    if (!record?.bannedUntil) return false;
    if (Date.now() < record.bannedUntil) return true;
    this.#keyFailures.delete(`${address} ${key}`);
    return false;
  }

  /** `rate_limiter.py`, `record_key_failure`: the Nth failure of a key from one address within the window bans that pair. */
  #recordKeyFailure(address: string, key: string): void {
    const record = this.#keyFailures.get(`${address} ${key}`) ?? { timestamps: [], bannedUntil: 0 };
    const now = Date.now();
    record.timestamps = record.timestamps.filter((at) => at > now - this.#keyBan.windowMs);
    record.timestamps.push(now);
    if (record.timestamps.length >= this.#keyBan.maxFailures) record.bannedUntil = now + this.#keyBan.banMs;
    this.#keyFailures.set(`${address} ${key}`, record);
  }

  /** `rate_limiter.py`, `record_invalid_key`: failures within the window; the Nth bans the address. */
  #recordInvalid(address: string): void {
    this.invalidBearers++;
    const record = this.#failures.get(address) ?? { timestamps: [], bannedUntil: 0 };
    const now = Date.now();
    record.timestamps = record.timestamps.filter((at) => at > now - this.#ban.windowMs);
    record.timestamps.push(now);
    if (record.timestamps.length >= this.#ban.maxFailures) record.bannedUntil = now + this.#ban.banMs;
    this.#failures.set(address, record);
  }
}

/** `auth_service.py`, `_get_client_ip`: the peer address (no trusted proxies configured). */
function clientAddress(req: IncomingMessage): string {
  return (req.socket.remoteAddress ?? '').replace(/^::ffff:/, '');
}

/** The bearer token (`OAuth2PasswordBearer`), or undefined. */
function bearer(req: IncomingMessage): string | undefined {
  const header = req.headers.authorization ?? '';
  const match = /^Bearer\s+(.+)$/i.exec(header);
  return match?.[1]?.trim() || undefined;
}

function base64url(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}
