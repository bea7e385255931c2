import type { Knex } from 'knex';
import type { PgBoss } from 'pg-boss';
import type { components } from '../../generated/api.d.ts';
import { requireOrganization, requireVerifiedEmail, type SessionPrincipal } from '../principal.ts';
import type { Config } from '../config.ts';
import type { Keyring } from '../crypto.ts';
import type { WebhookEndpointRow } from '../db/models/webhooks.ts';
import { AppError } from '../errors.ts';
import { enqueue } from '../jobs/queue.ts';
import { newSigningSecret, SECRET_SEAL } from './signature.ts';
import { parseTargetUrl, resolveTarget, TargetRefused, type TargetPolicy } from './target-address.ts';
import { DELIVER_WEBHOOK_QUEUE } from './webhook-delivery.ts';
import { payloadOf, toWebhookDelivery, toWebhookEndpoint, type WebhookEndpoint } from './webhook-payloads.ts';
import {
  countEndpointsOf,
  deleteEndpoint,
  findEndpointOf,
  insertEndpoint,
  insertTestDelivery,
  listAttemptsOf,
  listEndpointsOf,
  updateEndpoint,
} from './webhooks.repository.ts';

type Schemas = components['schemas'];
type Page<T> = { items: T[]; total: number; limit: number; offset: number };

/** Endpoints an organization may have: each status change writes a delivery per endpoint in its transaction. */
export const MAX_ENDPOINTS_PER_ORGANIZATION = 20;
/** How long the previous secret still signs after a rotation, unless the rotation says otherwise. */
const DEFAULT_PREVIOUS_SECRET_SECONDS = 86_400;

/**
 * An organization's webhook endpoints as its admins manage them: the URL checked against the
 * target rules (public addresses only, https, unless private targets are allowed), the signing
 * secret made here, shown once and sealed at rest, a test event queued like any delivery.
 */
export class WebhooksService {
  readonly #db: Knex;
  readonly #boss: PgBoss;
  readonly #keyring: Keyring;
  readonly #policy: TargetPolicy;

  constructor(deps: { db: Knex; boss: PgBoss; keyring: Keyring; settings: Config['webhooks'] }) {
    this.#db = deps.db;
    this.#boss = deps.boss;
    this.#keyring = deps.keyring;
    this.#policy = { allowPrivate: deps.settings.allowPrivateTargets };
  }

  async list(principal: SessionPrincipal): Promise<Schemas['WebhookEndpointList']> {
    const rows = await listEndpointsOf(this.#db, requireOrganization(principal).id);
    return { items: rows.map(toWebhookEndpoint) };
  }

  async create(principal: SessionPrincipal, input: Schemas['CreateWebhookEndpointRequest']): Promise<Schemas['WebhookEndpointWithSecret']> {
    const organization = requireOrganization(principal);
    requireVerifiedEmail(principal, 'create webhook endpoints');
    if ((await countEndpointsOf(this.#db, organization.id)) >= MAX_ENDPOINTS_PER_ORGANIZATION) {
      throw new AppError('VALIDATION_FAILED', `An organization has at most ${MAX_ENDPOINTS_PER_ORGANIZATION} webhook endpoints; delete one first.`, {
        errors: [{ location: 'body', message: `the organization already has ${MAX_ENDPOINTS_PER_ORGANIZATION} webhook endpoints` }],
      });
    }
    const url = await this.#checkedUrl(input.url);
    const secret = newSigningSecret();
    const row = await insertEndpoint(this.#db, {
      organization_id: organization.id,
      url,
      description: input.description ?? null,
      event_types: input.event_types ?? null,
      sealed_secret: this.#keyring.encrypt(SECRET_SEAL, secret),
      created_by_user_id: principal.user.id,
    });
    return { secret, endpoint: toWebhookEndpoint(row) };
  }

  async get(principal: SessionPrincipal, id: string): Promise<WebhookEndpoint> {
    return toWebhookEndpoint(await this.#find(this.#db, principal, id));
  }

  async update(principal: SessionPrincipal, id: string, input: Schemas['UpdateWebhookEndpointRequest']): Promise<WebhookEndpoint> {
    const url = input.url === undefined ? undefined : await this.#checkedUrl(input.url);
    return this.#db.transaction(async (trx) => {
      const endpoint = await this.#find(trx, principal, id, true);
      const changes: Parameters<typeof updateEndpoint>[2] = {};
      if (url !== undefined) changes.url = url;
      if (input.description !== undefined) changes.description = input.description;
      if (input.event_types !== undefined) changes.event_types = input.event_types;
      if (input.status === 'enabled' && endpoint.status !== 'enabled') {
        Object.assign(changes, { status: 'enabled', disabled_reason: null, disabled_at: null, consecutive_failures: 0 });
      } else if (input.status === 'disabled' && endpoint.status !== 'disabled') {
        Object.assign(changes, { status: 'disabled', disabled_reason: 'Disabled by an admin.', disabled_at: trx.fn.now() });
      }
      if (!Object.keys(changes).length) return toWebhookEndpoint(endpoint);
      return toWebhookEndpoint(await updateEndpoint(trx, id, changes));
    });
  }

  async delete(principal: SessionPrincipal, id: string): Promise<void> {
    await this.#db.transaction(async (trx) => {
      await this.#find(trx, principal, id, true);
      await deleteEndpoint(trx, id);
    });
  }

  /** A new secret; the current one keeps signing for the time asked (24 hours by default, 0: not at all). */
  async rotateSecret(principal: SessionPrincipal, id: string, input: Schemas['RotateWebhookSecretRequest'] | undefined): Promise<Schemas['WebhookEndpointWithSecret']> {
    const keepSeconds = input?.previous_secret_valid_for_seconds ?? DEFAULT_PREVIOUS_SECRET_SECONDS;
    const secret = newSigningSecret();
    return this.#db.transaction(async (trx) => {
      const endpoint = await this.#find(trx, principal, id, true);
      const row = await updateEndpoint(trx, id, {
        sealed_secret: this.#keyring.encrypt(SECRET_SEAL, secret),
        previous_sealed_secret: keepSeconds > 0 ? endpoint.sealed_secret : null,
        previous_secret_expires_at: keepSeconds > 0 ? (trx.raw(`now() + make_interval(secs => ?)`, [keepSeconds]) as unknown as Date) : null,
      });
      return { secret, endpoint: toWebhookEndpoint(row) };
    });
  }

  /** Queues a `webhook.test` delivery to the endpoint; answers it and the body it POSTs. */
  async sendTest(principal: SessionPrincipal, id: string): Promise<Schemas['WebhookTestSent']> {
    return this.#db.transaction(async (trx) => {
      const endpoint = await this.#find(trx, principal, id);
      const delivery = await insertTestDelivery(trx, endpoint.id);
      await enqueue(this.#boss, trx, DELIVER_WEBHOOK_QUEUE, { deliveryId: delivery.id }, { id: delivery.id });
      return { delivery: toWebhookDelivery(delivery), payload: payloadOf(delivery, undefined) };
    });
  }

  async listAttempts(principal: SessionPrincipal, id: string, page: { limit?: number; offset?: number }): Promise<Page<Schemas['WebhookDeliveryAttempt']>> {
    const endpoint = await this.#find(this.#db, principal, id);
    const limit = page.limit ?? 100;
    const offset = page.offset ?? 0;
    const { rows, total } = await listAttemptsOf(this.#db, endpoint.id, { limit, offset });
    return {
      items: rows.map((row) => ({
        id: Number(row.id),
        delivery_id: row.delivery_id,
        event_type: row.event_type,
        event_id: row.event_id === null ? null : Number(row.event_id),
        attempt: row.attempt,
        outcome: row.outcome,
        response_status: row.response_status,
        error: row.error,
        duration_ms: row.duration_ms,
        created_at: row.created_at.toISOString(),
      })),
      total,
      limit,
      offset,
    };
  }

  /** The URL as stored (normalized), or 422 saying why it is refused; its host is resolved now (and again at each delivery). */
  async #checkedUrl(raw: string): Promise<string> {
    try {
      const url = parseTargetUrl(raw, this.#policy);
      await resolveTarget(url, this.#policy);
      return url.href;
    } catch (error) {
      if (!(error instanceof TargetRefused)) throw error;
      throw new AppError('VALIDATION_FAILED', `The webhook URL is refused: it ${error.message}.`, { errors: [{ location: 'body/url', message: error.message }] });
    }
  }

  async #find(db: Knex | Knex.Transaction, principal: SessionPrincipal, id: string, forUpdate = false): Promise<WebhookEndpointRow> {
    const row = await findEndpointOf(db, requireOrganization(principal).id, id, { forUpdate });
    if (!row) throw new AppError('NOT_FOUND', `Webhook endpoint ${id} was not found.`);
    return row;
  }
}
