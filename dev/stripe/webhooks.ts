import { createHmac, randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type Stripe from 'stripe';
import { build, newId, type StripeObject, type StripeStore } from './store.ts';

/**
 * Events and their delivery, as Stripe does them (https://docs.stripe.com/webhooks): each change
 * is an `event` object (`id`, `object: "event"`, `type`, `data.object`, `data.previous_attributes`,
 * `created`, `api_version`) stored for `GET /v1/events` and POSTed to every webhook endpoint that
 * enabled its type, with `Stripe-Signature: t=<unix time>,v1=<HMAC-SHA256 of "t.payload" keyed by
 * the endpoint's secret>` (https://docs.stripe.com/webhooks#verify-manually), which the SDK's
 * `stripe.webhooks.constructEvent` checks. A delivery that gets no 2xx is retried with backoff
 * (Stripe retries for three days; the emulator's delays are configurable), each attempt signed anew.
 */
export interface Delivery {
  event_id: string;
  type: string;
  endpoint: string;
  attempt: number;
  status: number | 'network_error';
}

/** The SDK's Event with any type: the SDK types `type` and `data.object` as a union of every event it knows. */
export type EmulatedEvent = Omit<Stripe.Event, 'type' | 'data'> & { type: string; data: { object: StripeObject; previous_attributes?: Record<string, unknown> } };

export class WebhookSender {
  readonly deliveries: Delivery[] = [];
  private readonly pending = new Set<NodeJS.Timeout>();
  private stopped = false;

  private readonly store: StripeStore;
  private readonly options: { apiVersion: string; retryDelaysMs: number[]; secretOf: (endpointId: string) => string; log: Logger };

  constructor(store: StripeStore, options: WebhookSender['options']) {
    this.store = store;
    this.options = options;
  }

  /** Records the event and starts delivering it; `request` is the API request that caused it, as Stripe says. */
  emit(type: string, object: StripeObject, extra: { previous?: Record<string, unknown>; request?: { id: string; idempotency_key: string | null } } = {}): EmulatedEvent {
    const customer = typeof object.customer === 'string' ? object.customer : object.object === 'customer' ? object.id : undefined;
    const endpoints = this.store.all<Stripe.WebhookEndpoint>('webhook_endpoint', (endpoint) => endpoint.status === 'enabled' && subscribes(endpoint, type));
    const event = this.store.put(
      build<EmulatedEvent>('event', {
        id: newId('evt'),
        api_version: this.options.apiVersion,
        created: this.store.now(customer),
        data: { object: structuredClone(object), ...(extra.previous ? { previous_attributes: extra.previous } : {}) },
        pending_webhooks: endpoints.length,
        request: extra.request ?? { id: null, idempotency_key: null },
        type,
      }),
    );
    const message = { id: event.id, type, payload: JSON.stringify(event, null, 2), delivered: () => (event.pending_webhooks = Math.max(0, event.pending_webhooks - 1)) };
    for (const endpoint of endpoints) this.deliver(message, endpoint, 1);
    return event;
  }

  /**
   * A thin event (https://docs.stripe.com/event-destinations#events-overview): a v2 event, kept for
   * `GET /v2/core/events/:id` with its `data`, and its notification (id, type, related object, no
   * data) POSTed to every event destination whose payload style is thin and that enabled its type,
   * signed as webhooks are (stripe-node's `parseEventNotification` checks it the same way).
   */
  emitThin(type: string, relatedObject: { id: string; type: string; url: string }, data: Record<string, unknown>, customer?: string): ThinEvent {
    const destinations = this.store.all<EventDestination>('v2.core.event_destination', (destination) => destination.status === 'enabled' && destination.enabled_events.includes(type));
    const notification = {
      id: newId('evt_test', 44),
      object: 'v2.core.event' as const,
      type,
      created: new Date(this.store.now(customer) * 1000).toISOString(),
      livemode: false,
      context: null,
      reason: null,
      related_object: relatedObject,
    };
    const event = this.store.put({ ...notification, data });
    const message = { id: notification.id, type, payload: JSON.stringify(notification, null, 2) };
    for (const destination of destinations) {
      // The URL is read at each attempt, as a webhook endpoint's is: a retry goes where the destination now points.
      const endpoint = {
        id: destination.id,
        get url() {
          return destination.webhook_endpoint.url;
        },
      };
      this.deliver(message, endpoint, 1);
    }
    return event;
  }

  /** Stops retrying (the emulator is shutting down). */
  stop(): void {
    this.stopped = true;
    for (const timer of this.pending) clearTimeout(timer);
    this.pending.clear();
  }

  private deliver(message: Message, endpoint: { id: string; url: string }, attempt: number): void {
    if (this.stopped) return;
    const header = signatureHeader(message.payload, this.options.secretOf(endpoint.id), Math.floor(Date.now() / 1000));
    const record = (status: Delivery['status']) => this.deliveries.push({ event_id: message.id, type: message.type, endpoint: endpoint.id, attempt, status });
    fetch(endpoint.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json; charset=utf-8', 'stripe-signature': header, 'user-agent': 'Stripe/1.0 (+https://stripe.com/docs/webhooks)' },
      body: message.payload,
      signal: AbortSignal.timeout(10_000),
    })
      .then(async (response) => {
        await response.arrayBuffer().catch(() => undefined);
        record(response.status);
        if (response.ok) {
          message.delivered?.();
          return;
        }
        this.retry(message, endpoint, attempt, `HTTP ${response.status}`);
      })
      .catch((error: unknown) => {
        record('network_error');
        this.retry(message, endpoint, attempt, error instanceof Error ? error.message : String(error));
      });
  }

  private retry(message: Message, endpoint: { id: string; url: string }, attempt: number, reason: string): void {
    const delay = this.options.retryDelaysMs[attempt - 1];
    if (delay === undefined || this.stopped) {
      this.options.log.warn({ event: message.id, type: message.type, url: endpoint.url, attempts: attempt, reason }, 'Stripe emulator: webhook not delivered, giving up');
      return;
    }
    this.options.log.debug({ event: message.id, type: message.type, url: endpoint.url, attempt, reason }, 'Stripe emulator: webhook delivery failed, retrying');
    const timer = setTimeout(() => {
      this.pending.delete(timer);
      this.deliver(message, endpoint, attempt + 1);
    }, delay);
    timer.unref();
    this.pending.add(timer);
  }
}

/** One event's delivery payload, the same for each attempt (each signed anew). */
interface Message {
  id: string;
  type: string;
  payload: string;
  delivered?: () => void;
}

/** A v2 event as `GET /v2/core/events/:id` answers it (the thin notification plus its data). */
export interface ThinEvent {
  id: string;
  object: 'v2.core.event';
  type: string;
  created: string;
  related_object: { id: string; type: string; url: string };
  data: Record<string, unknown>;
}

/** An event destination (https://docs.stripe.com/api/v2/core/event_destinations) of type webhook_endpoint. */
export interface EventDestination {
  id: string;
  object: 'v2.core.event_destination';
  enabled_events: string[];
  event_payload: 'thin' | 'snapshot';
  status: 'enabled' | 'disabled';
  type: 'webhook_endpoint';
  webhook_endpoint: { url: string };
}

function subscribes(endpoint: Stripe.WebhookEndpoint, type: string): boolean {
  return endpoint.enabled_events.includes('*') || endpoint.enabled_events.includes(type);
}

/** `t=…,v1=…` exactly as Stripe computes it: HMAC-SHA256 keyed by the whole `whsec_…` secret. */
export function signatureHeader(payload: string, secret: string, timestamp: number): string {
  const signature = createHmac('sha256', secret).update(`${timestamp}.${payload}`, 'utf8').digest('hex');
  return `t=${timestamp},v1=${signature}`;
}

/** A webhook signing secret in Stripe's format. */
export function newWebhookSecret(): string {
  return `whsec_${randomBytes(24).toString('base64url')}`;
}
