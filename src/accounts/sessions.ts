import type { Knex } from 'knex';
import { hashToken, randomToken } from '../crypto.ts';
import type { Role, SessionPrincipal } from './principal.ts';

const DAY_MS = 24 * 60 * 60 * 1000;
/** Sessions last 30 days and slide: one used with fewer than 15 days left is extended to 30 again. */
export const SESSION_LIFETIME_MS = 30 * DAY_MS;
const RENEW_WITHIN_MS = 15 * DAY_MS;

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

interface SessionRow {
  id: string;
  auth_method: string;
  expires_at: Date;
  user_id: number;
  email: string;
  user_name: string;
  email_verified_at: Date | null;
  organization_id: number | null;
  organization_name: string | null;
  role: Role | null;
}

/**
 * Server-side sessions on Lucia's design: a random token of 160 bits in the cookie, its SHA-256 as
 * the primary key. Validation is one primary-key lookup (joined to the user and membership) and
 * writes only when the session is extended, at most about once in 15 days.
 */
export class SessionStore {
  readonly #db: Knex;

  constructor(db: Knex) {
    this.#db = db;
  }

  async create(db: Knex | Knex.Transaction, input: { userId: number; organizationId: number | null; authMethod: string }): Promise<NewSession> {
    const token = randomToken(20);
    const id = hashToken(token);
    await db('sessions').insert({
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
    if (principal.expiresAt.getTime() <= now) {
      await this.#db('sessions').where({ id }).delete();
      return null;
    }
    if (principal.expiresAt.getTime() - now >= RENEW_WITHIN_MS) return { principal, renewed: false };
    const expiresAt = new Date(now + SESSION_LIFETIME_MS);
    await this.#db('sessions').where({ id }).update({ expires_at: expiresAt });
    return { principal: { ...principal, expiresAt }, renewed: true };
  }

  /** The session by id with its user, organization and role, as one indexed lookup. */
  async load(id: string, db: Knex | Knex.Transaction = this.#db): Promise<SessionPrincipal | null> {
    const row: SessionRow | undefined = await db('sessions as s')
      .join('users as u', 'u.id', 's.user_id')
      .leftJoin('organizations as o', 'o.id', 's.organization_id')
      .leftJoin('memberships as m', function joinMembership() {
        this.on('m.organization_id', 's.organization_id').andOn('m.user_id', 's.user_id');
      })
      .where('s.id', id)
      .first(
        's.id',
        's.auth_method',
        's.expires_at',
        's.user_id',
        'u.email',
        'u.name as user_name',
        'u.email_verified_at',
        's.organization_id',
        'o.name as organization_name',
        'm.role',
      );
    if (!row) return null;
    const inOrganization = row.organization_id !== null && row.role !== null;
    return {
      kind: 'session',
      sessionId: row.id,
      expiresAt: row.expires_at,
      authMethod: row.auth_method,
      user: { id: row.user_id, email: row.email, name: row.user_name, emailVerified: row.email_verified_at !== null },
      organization: inOrganization ? { id: row.organization_id as number, name: row.organization_name ?? '' } : null,
      role: inOrganization ? row.role : null,
    };
  }

  async setOrganization(db: Knex | Knex.Transaction, sessionId: string, organizationId: number): Promise<void> {
    await db('sessions').where({ id: sessionId }).update({ organization_id: organizationId });
  }

  async invalidate(sessionId: string): Promise<void> {
    await this.#db('sessions').where({ id: sessionId }).delete();
  }

  async invalidateAllOfUser(db: Knex | Knex.Transaction, userId: number): Promise<void> {
    await db('sessions').where({ user_id: userId }).delete();
  }
}
