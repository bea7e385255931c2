import { deleteInBatches } from '../db/query.ts';
import type { Knex } from 'knex';
import { adminsOf, findOrganization } from '../organizations/organizations.repository.ts';
import type { PgBoss } from 'pg-boss';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import type { Keyring } from '../crypto.ts';
import type { WebhookEndpointRow } from '../db/models/webhooks.ts';
import type { EmailOutbox } from '../email/email.outbox.ts';
import { findEvent } from '../events/events.repository.ts';
import { enqueue, type JobDefinition } from '../jobs/queue.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { SECRET_SEAL, webhookHeaders } from './signature.ts';
import { postWebhook, type AttemptResult } from './webhook-sender.ts';
import { payloadOf } from './webhook-payloads.ts';
import {
  abandonDelivery,
  claimUnqueuedDeliveries,
  findDelivery,
  findEndpoint,
  markQueued,
  pruneDeliveries,
  recordAttempt,
  updateEndpoint,
} from './webhooks.repository.ts';

export const DELIVER_WEBHOOK_QUEUE = 'deliver-webhook';

/**
 * One delivery attempt per job run: the delivery's body (the same at every attempt), signed at the
 * attempt's time with the endpoint's secret (and the previous one while it still signs), POSTed
 * without following redirects to an address checked when connecting, and recorded. A failed attempt
 * fails the job for pg-boss to retry; deliveries failed for good in a row disable the endpoint. The
 * job is keyed by the delivery id, and a delivery no longer pending is not sent again. Retries,
 * disabling, test deliveries: docs/events-and-webhooks.md, Deliveries and Disabling.
 */
export class WebhookDeliverer {
  readonly #db: Knex;
  readonly #keyring: Keyring;
  readonly #outbox: EmailOutbox;
  readonly #settings: Config['webhooks'];
  readonly #webAppUrl: string;
  readonly #metrics: Metrics | undefined;

  constructor(deps: { db: Knex; keyring: Keyring; outbox: EmailOutbox; settings: Config['webhooks']; webAppUrl: string; metrics?: Metrics | undefined }) {
    this.#metrics = deps.metrics;
    this.#db = deps.db;
    this.#keyring = deps.keyring;
    this.#outbox = deps.outbox;
    this.#settings = deps.settings;
    this.#webAppUrl = deps.webAppUrl;
  }

  async deliver(deliveryId: string, log: Logger, lastAttempt: boolean): Promise<void> {
    const delivery = await findDelivery(this.#db, deliveryId);
    if (!delivery || delivery.status !== 'pending') return;
    const endpoint = await findEndpoint(this.#db, delivery.endpoint_id);
    if (!endpoint) return;
    const test = delivery.event_type === 'webhook.test';
    if (endpoint.status !== 'enabled' && !test) {
      await abandonDelivery(this.#db, deliveryId, 'The endpoint was disabled before this delivery went out.');
      this.#metrics?.webhookAttempt('abandoned');
      return;
    }
    const event = delivery.event_id === null ? undefined : await findEvent(this.#db, delivery.event_id);
    if (!test && !event) return;
    const body = JSON.stringify(payloadOf(delivery, event));
    const headers = webhookHeaders(this.#secretsOf(endpoint), delivery.id, Math.floor(Date.now() / 1000), body);
    const result = await postWebhook(endpoint.url, headers, body, { timeoutMs: this.#settings.timeoutMs, policy: { allowPrivate: this.#settings.allowPrivateTargets } });
    const final = result.ok || lastAttempt;
    await this.#db.transaction(async (trx) => {
      // The endpoint first: attempts of its deliveries are counted one after the other.
      const locked = await findEndpoint(trx, endpoint.id, { lock: true });
      if (!locked) return;
      await recordAttempt(
        trx,
        { delivery_id: delivery.id, endpoint_id: endpoint.id, outcome: result.ok ? 'succeeded' : 'failed', response_status: result.status, error: result.error, duration_ms: result.durationMs },
        final,
      );
      if (!test) await this.#count(trx, locked, result, lastAttempt, log);
    });
    const fields = { delivery_id: delivery.id, endpoint_id: endpoint.id, status: result.status, duration_ms: result.durationMs };
    this.#metrics?.webhookAttempt(result.ok ? 'succeeded' : lastAttempt ? 'failed' : 'retrying', result.durationMs / 1000);
    if (result.ok) {
      log.info(fields, 'webhook delivered');
      return;
    }
    log.warn({ ...fields, err: result.error, last_attempt: lastAttempt }, 'webhook delivery attempt failed');
    if (!lastAttempt) throw new Error(result.error ?? 'the attempt failed');
  }

  /** The secrets that sign now: the current one, and the previous one until its rotation grace ends. */
  #secretsOf(endpoint: WebhookEndpointRow): string[] {
    const secrets = [this.#keyring.decrypt(SECRET_SEAL, endpoint.sealed_secret)];
    const previousValid = endpoint.previous_sealed_secret && endpoint.previous_secret_expires_at && endpoint.previous_secret_expires_at.getTime() > Date.now();
    if (previousValid) secrets.push(this.#keyring.decrypt(SECRET_SEAL, endpoint.previous_sealed_secret as string));
    return secrets;
  }

  /** The endpoint's run of failures after this attempt; disables it (and emails its admins) at the limit. */
  async #count(trx: Knex.Transaction, endpoint: WebhookEndpointRow, result: AttemptResult, lastAttempt: boolean, log: Logger): Promise<void> {
    const endpointId = endpoint.id;
    if (result.ok) {
      if (endpoint.consecutive_failures > 0) await updateEndpoint(trx, endpointId, { consecutive_failures: 0 });
      return;
    }
    // A disabled endpoint's count stays where it was disabled (attempts already under way then end here).
    if (!lastAttempt || endpoint.status !== 'enabled') return;
    const failures = endpoint.consecutive_failures + 1;
    if (failures < this.#settings.disableAfterFailures) {
      await updateEndpoint(trx, endpointId, { consecutive_failures: failures });
      return;
    }
    const reason = `${failures} deliveries in a row failed for good; the last: ${result.error ?? 'unknown error'}`;
    await updateEndpoint(trx, endpointId, { consecutive_failures: failures, status: 'disabled', disabled_reason: reason.slice(0, 1000), disabled_at: trx.fn.now() as unknown as Date });
    const organization = await findOrganization(trx, endpoint.organization_id);
    for (const { email: to } of await adminsOf(trx, endpoint.organization_id)) {
      await this.#outbox.enqueue(trx, { to, template: 'webhook_endpoint_disabled', ...disabledEmail({ url: endpoint.url, organization: organization?.name ?? 'your organization', reason, link: `${this.#webAppUrl}/settings/webhooks` }) });
    }
    log.warn({ endpoint_id: endpointId, failures }, 'webhook endpoint disabled after repeated failures');
  }
}

function disabledEmail(input: { url: string; organization: string; reason: string; link: string }): { subject: string; text: string } {
  const text = [
    `The webhook endpoint ${input.url} of ${input.organization} was disabled: ${input.reason}.`,
    'No event is delivered to it until an admin enables it again (status "enabled"); events that happen meanwhile are not delivered later.',
    `Manage webhook endpoints: ${input.link}`,
    '',
  ].join('\n\n');
  return { subject: `A webhook endpoint of ${input.organization} was disabled`, text };
}

export function deliverWebhookJob(deliverer: WebhookDeliverer, settings: Config['webhooks']): JobDefinition<{ deliveryId: string }> {
  return {
    queue: DELIVER_WEBHOOK_QUEUE,
    retryLimit: settings.retry.limit,
    retryDelaySeconds: settings.retry.delaySeconds,
    retryDelayMaxSeconds: settings.retry.maxDelaySeconds,
    concurrency: 8,
    handle: ({ deliveryId }, { log, lastAttempt }) => deliverer.deliver(deliveryId, log, lastAttempt),
  };
}

export const PRUNE_WEBHOOK_DELIVERIES_QUEUE = 'prune-webhook-deliveries';
/** How long a completed delivery and its attempts stay listable. */
const DELIVERY_RETENTION_DAYS = 30;

/** Daily: deliveries completed more than 30 days ago are deleted with their attempts, in batches. */
export function pruneWebhookDeliveriesJob(db: Knex): JobDefinition {
  return {
    queue: PRUNE_WEBHOOK_DELIVERIES_QUEUE,
    schedule: '17 3 * * *',
    policy: 'short',
    retryLimit: 2,
    async handle(_data, { log }) {
      const before = new Date(Date.now() - DELIVERY_RETENTION_DAYS * 86_400_000);
      const deleted = await deleteInBatches((limit) => pruneDeliveries(db, before, limit));
      if (deleted) log.info({ deleted }, 'old webhook deliveries deleted');
    },
  };
}

/** Deliveries queued per transaction by the dispatcher. */
const DISPATCH_BATCH = 100;
/** How often a worker looks for deliveries no notification woke it for (one written while its listener reconnected). */
const BACKSTOP_MS = 30_000;

/**
 * Queues the job of each delivery written with a deployment event (in the event's transaction,
 * where no job queue is at hand): in worker processes, woken by the event's notification, at
 * start, when the change listener reconnects, and every 30 s as a backstop. Deliveries are
 * claimed with SKIP LOCKED and marked queued in the transaction that queues their jobs (each job's
 * id is its delivery's), so several workers never queue one twice.
 */
export class WebhookDispatcher {
  readonly #db: Knex;
  readonly #boss: PgBoss;
  readonly #log: Logger;
  #running: Promise<void> | undefined;
  #again = false;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(deps: { db: Knex; boss: PgBoss; log: Logger }) {
    this.#db = deps.db;
    this.#boss = deps.boss;
    this.#log = deps.log;
  }

  start(): void {
    this.wake();
    this.#timer = setInterval(() => this.wake(), BACKSTOP_MS).unref();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    await this.#running;
  }

  /** Queues what waits; a wake-up while a run is under way makes it run once more. */
  wake(): void {
    if (this.#stopped) return;
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#running = this.#run().finally(() => {
      this.#running = undefined;
      if (this.#again) {
        this.#again = false;
        this.wake();
      }
    });
  }

  /** One run: batches until none is left; returns how many were queued. */
  async dispatch(): Promise<number> {
    let total = 0;
    for (;;) {
      const queued = await this.#db.transaction(async (trx) => {
        const ids = await claimUnqueuedDeliveries(trx, DISPATCH_BATCH);
        for (const id of ids) await enqueue(this.#boss, trx, DELIVER_WEBHOOK_QUEUE, { deliveryId: id }, { id });
        if (ids.length) await markQueued(trx, ids);
        return ids.length;
      });
      total += queued;
      if (queued < DISPATCH_BATCH || this.#stopped) return total;
    }
  }

  async #run(): Promise<void> {
    try {
      await this.dispatch();
    } catch (error) {
      this.#log.warn({ err: error }, 'could not queue webhook deliveries; retrying at the next wake-up');
    }
  }
}
