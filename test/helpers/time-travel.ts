import { hashToken } from '../../src/crypto.ts';
import type { TestApp } from './app.ts';

type Db = Pick<TestApp, 'db'>;

/**
 * Moves stored times into the past, as if time had passed: what a test of expiry needs and what
 * neither the API nor the repositories offer (on purpose). With two catalog rows of
 * provisioning.test.ts, one billing limit of deployments.test.ts and a usage anomaly of
 * usage-summary.test.ts, the only raw writes of the tests; each function names what it ages.
 */

/** The session of this cookie token now has these creation and expiry times. */
export async function ageSession(app: Db, sessionToken: string, times: { createdAt?: Date; expiresAt?: Date }): Promise<void> {
  const changes = { ...(times.createdAt ? { created_at: times.createdAt } : {}), ...(times.expiresAt ? { expires_at: times.expiresAt } : {}) };
  await app.db('sessions').where({ id: hashToken(sessionToken) }).update(changes);
}

/** The invitation (by id, or by the token of its email) expired a second ago. */
export async function expireInvitation(app: Db, which: { id: number } | { token: string }): Promise<void> {
  const where = 'id' in which ? { id: which.id } : { token_hash: hashToken(which.token) };
  await app.db('invitations').where(where).update({ expires_at: new Date(Date.now() - 1000) });
}

/** The password-reset link of this token expired a moment ago. */
export async function expireResetToken(app: Db, token: string): Promise<void> {
  await app.db('password_reset_tokens').where({ token_hash: hashToken(token) }).update({ expires_at: new Date(Date.now() - 1) });
}

/** The email-verification link of this token expired a second ago. */
export async function expireVerificationToken(app: Db, token: string): Promise<void> {
  await app.db('email_verification_tokens').where({ token_hash: hashToken(token) }).update({ expires_at: new Date(Date.now() - 1000) });
}

/** The rate limiter's counter or hold of this key (as stored, prefix included) ends now, its count kept. */
export async function expireRateLimit(app: Db, key: string): Promise<void> {
  const updated = await app.db('rate_limit_points').where({ key }).update({ expire: Date.now() - 1 });
  if (updated !== 1) throw new Error(`no rate limit counter ${key}`);
}

/**
 * The running deployment entered `running` at `since` (a whole second), as if it had run since then:
 * its replica served from then on.
 */
export async function runningSince(app: Db, deploymentId: string, since: Date): Promise<void> {
  await app.db.transaction(async (trx) => {
    const deployments = await trx('deployments').where({ id: deploymentId, status: 'running' }).update({ status_changed_at: since });
    const replicas = await trx('deployment_replicas').where({ deployment_id: deploymentId, status: 'ready' }).whereNull('accrued_until').update({ running_since: since, ready_at: since });
    if (deployments !== 1 || replicas !== 1) throw new Error(`deployment ${deploymentId} is not running, or its GPU seconds were already closed`);
  });
}

/** The webhook delivery completed this many days ago. */
export async function ageWebhookDelivery(app: Db, deliveryId: string, days: number): Promise<void> {
  const updated = await app.db('webhook_deliveries').where({ id: deliveryId }).whereNotNull('completed_at').update({ completed_at: new Date(Date.now() - days * 86_400_000) });
  if (updated !== 1) throw new Error(`no completed webhook delivery ${deliveryId}`);
}
