import type { Knex } from 'knex';
import { hashToken, randomToken } from '../crypto.ts';
import { deleteInBatches } from '../db/query.ts';
import type { JobDefinition } from '../jobs/queue.ts';
import {
  deleteEndedSessions,
  deleteSession,
  deleteSessionOfUser,
  deleteSessionsOfUser,
  deleteSessionsOfUserExcept,
  deleteSessionsOfUserIn,
  extendSession,
  findSessionView,
  insertSession,
  listLiveSessionsOfUser,
  setSessionOrganization,
} from './accounts.repository.ts';
import type { SessionPrincipal } from '../principal.ts';

const DAY_MS = 24 * 60 * 60 * 1000;
/** Sessions last 30 days and slide: one used with fewer than 15 days left is extended to 30 again. */
export const SESSION_LIFETIME_MS = 30 * DAY_MS;
const RENEW_WITHIN_MS = 15 * DAY_MS;
/** ...but never past 90 days after sign-in, however often they are used. */
export const SESSION_ABSOLUTE_LIFETIME_MS = 90 * DAY_MS;

/** One of a user's sessions, as the user may see it: never the token or its hash. */
export interface SessionSummary {
  publicId: string;
  createdAt: Date;
  expiresAt: Date;
  authMethod: string;
  current: boolean;
}

export interface NewSession {
  /** The secret the browser holds; only its SHA-256 (the session id) is stored. */
  token: string;
  principal: SessionPrincipal;
}

export interface ValidatedSession {
  principal: SessionPrincipal;
  /** True when this validation extended the session: the cookies must be sent again. */
  renewed: boolean;
}

/**
 * Server-side sessions on Lucia's design: a random token of 160 bits in the cookie, its SHA-256 as
 * the primary key. Validation is one primary-key lookup (joined to the user and membership) and
 * writes only when the session is extended, at most about once in 15 days. A session ends 30 days
 * after its last extension, and in any case 90 days after sign-in (its absolute lifetime).
 */
export class SessionStore {
  readonly #db: Knex;

  constructor(db: Knex) {
    this.#db = db;
  }

  async create(db: Knex | Knex.Transaction, input: { userId: number; organizationId: number | null; authMethod: string }): Promise<NewSession> {
    const token = randomToken(20);
    const id = hashToken(token);
    await insertSession(db, {
      id,
      user_id: input.userId,
      organization_id: input.organizationId,
      auth_method: input.authMethod,
      expires_at: new Date(Date.now() + SESSION_LIFETIME_MS),
    });
    const principal = await this.load(id, db);
    if (!principal) throw new Error('A session just created could not be read back');
    return { token, principal };
  }

  /** The session a cookie token names, extended when due; null when unknown or expired. */
  async validate(token: string): Promise<ValidatedSession | null> {
    const id = hashToken(token);
    const principal = await this.load(id);
    if (!principal) return null;
    const now = Date.now();
    const absoluteEnd = principal.createdAt.getTime() + SESSION_ABSOLUTE_LIFETIME_MS;
    if (principal.expiresAt.getTime() <= now || absoluteEnd <= now) {
      await deleteSession(this.#db, id);
      return null;
    }
    const expiresAt = new Date(Math.min(now + SESSION_LIFETIME_MS, absoluteEnd));
    if (principal.expiresAt.getTime() - now >= RENEW_WITHIN_MS || expiresAt <= principal.expiresAt) return { principal, renewed: false };
    await extendSession(this.#db, id, expiresAt);
    return { principal: { ...principal, expiresAt }, renewed: true };
  }

  /** The user's sessions that have not ended, newest first; `current` marks the caller's. */
  async listOfUser(userId: number, currentSessionId: string): Promise<SessionSummary[]> {
    const rows = await listLiveSessionsOfUser(this.#db, userId, SESSION_ABSOLUTE_LIFETIME_MS / 1000);
    return rows.map((row) => ({
      publicId: row.public_id,
      createdAt: row.created_at,
      expiresAt: row.expires_at,
      authMethod: row.auth_method,
      current: row.id === currentSessionId,
    }));
  }

  /** Ends the user's session with this public id; returns its id, or null when the user has none such. */
  async invalidateOfUser(userId: number, publicId: string): Promise<string | null> {
    return deleteSessionOfUser(this.#db, userId, publicId);
  }

  /** Deletes the rows of sessions that have ended, in batches; returns how many went. */
  async pruneEnded(): Promise<number> {
    return deleteInBatches((limit) => deleteEndedSessions(this.#db, SESSION_ABSOLUTE_LIFETIME_MS / 1000, limit));
  }

  /** Ends every session of the user but one; returns how many ended. */
  async invalidateOthersOfUser(userId: number, keptSessionId: string): Promise<number> {
    return deleteSessionsOfUserExcept(this.#db, userId, keptSessionId);
  }

  /** Ends the user's sessions in one organization (removal from it), in the caller's transaction. */
  async invalidateInOrganization(db: Knex | Knex.Transaction, userId: number, organizationId: number): Promise<number> {
    return deleteSessionsOfUserIn(db, userId, organizationId);
  }

  /** The session by id with its user, organization and role, as one indexed lookup. */
  async load(id: string, db: Knex | Knex.Transaction = this.#db): Promise<SessionPrincipal | null> {
    const row = await findSessionView(db, id);
    if (!row) return null;
    const inOrganization = row.organization_id !== null && row.role !== null;
    return {
      kind: 'session',
      sessionId: row.id,
      expiresAt: row.expires_at,
      createdAt: row.created_at,
      authMethod: row.auth_method,
      user: { id: row.user_id, email: row.email, name: row.user_name, emailVerified: row.email_verified_at !== null },
      organization: inOrganization ? { id: row.organization_id as number, name: row.organization_name ?? '' } : null,
      role: inOrganization ? row.role : null,
    };
  }

  async setOrganization(db: Knex | Knex.Transaction, sessionId: string, organizationId: number): Promise<void> {
    await setSessionOrganization(db, sessionId, organizationId);
  }

  async invalidate(sessionId: string): Promise<void> {
    await deleteSession(this.#db, sessionId);
  }

  async invalidateAllOfUser(db: Knex | Knex.Transaction, userId: number): Promise<void> {
    await deleteSessionsOfUser(db, userId);
  }
}

export const PRUNE_SESSIONS_QUEUE = 'prune-ended-sessions';

/**
 * Daily: the rows of ended sessions go (they are refused anyway; one row per sign-in otherwise
 * stays for good). A session ends 30 days after its last extension and at most 90 after sign-in.
 */
export function pruneEndedSessionsJob(sessions: SessionStore): JobDefinition {
  return {
    queue: PRUNE_SESSIONS_QUEUE,
    schedule: '41 3 * * *',
    policy: 'short',
    retryLimit: 2,
    async handle(_data, { log }) {
      const deleted = await sessions.pruneEnded();
      if (deleted) log.info({ deleted }, 'ended sessions deleted');
    },
  };
}
