import { createServer, type Server } from 'node:http';
import type Stripe from 'stripe';
import { createStripeClient } from '../../src/adapters/stripe.ts';
import { startStripeEmulator, type StripeEmulator } from '../../dev/stripe/stripe-emulator.ts';
import { createLogger } from '../../src/logger.ts';
import { waitUntil } from './net.ts';

/**
 * The Stripe the billing tests talk to through the real `stripe` SDK: the local Stripe emulator,
 * or a Stripe test-mode account when `STRIPE_TEST_SECRET_KEY` is set (by `STRIPE_SECRET_KEY=sk_test_… make test-billing`; sk_test_… only; the
 * internet is then needed). Parts only the emulator can do (completing Checkout without a browser,
 * webhooks to a loopback address, a whole billing period in a second) run on the emulator alone.
 */
export const realStripeKey = process.env.STRIPE_TEST_SECRET_KEY || undefined;
if (realStripeKey && !realStripeKey.startsWith('sk_test_')) throw new Error('STRIPE_TEST_SECRET_KEY must be a test-mode key (sk_test_…)');
export const onEmulator = !realStripeKey;

export interface StripeTarget {
  stripe: Stripe;
  secretKey: string;
  /** Where the SDK is pointed (undefined: api.stripe.com). */
  apiUrl: string | undefined;
  emulator: StripeEmulator | undefined;
  stop(): Promise<void>;
}

export async function startStripeTarget(): Promise<StripeTarget> {
  if (realStripeKey) {
    return { stripe: createStripeClient({ secretKey: realStripeKey }), secretKey: realStripeKey, apiUrl: undefined, emulator: undefined, stop: async () => undefined };
  }
  // Retries come quickly here: a test waits for the second attempt, not for Stripe's hours.
  const emulator = await startStripeEmulator({ log: createLogger('silent'), webhookRetryDelaysMs: [50, 100, 200] });
  return {
    stripe: createStripeClient({ secretKey: emulator.secretKey, apiUrl: emulator.url }),
    secretKey: emulator.secretKey,
    apiUrl: emulator.url,
    emulator,
    stop: () => emulator.stop(),
  };
}

export interface ReceivedWebhook {
  payload: string;
  signature: string | undefined;
  event: { id: string; type: string; data: { object: { id: string; object: string } & Record<string, unknown> } };
}

/** A webhook endpoint on loopback that keeps what it receives; it can refuse the next N deliveries with 500. */
export class WebhookReceiver {
  readonly received: ReceivedWebhook[] = [];
  private refusals = 0;
  private server: Server | undefined;
  url = '';

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        if (this.refusals > 0) {
          this.refusals -= 1;
          res.writeHead(500).end();
          return;
        }
        const payload = Buffer.concat(chunks).toString('utf8');
        const signature = req.headers['stripe-signature'];
        this.received.push({ payload, signature: Array.isArray(signature) ? signature[0] : signature, event: JSON.parse(payload) as ReceivedWebhook['event'] });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((resolve) => this.server?.listen(0, '127.0.0.1', resolve));
    const address = this.server.address();
    this.url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/webhook`;
    return this;
  }

  refuseNext(count: number): void {
    this.refusals = count;
  }

  /** The events received so far about one object, in the order they came. */
  about(objectId: string): ReceivedWebhook[] {
    return this.received.filter((webhook) => webhook.event.data.object.id === objectId);
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}

/**
 * Waits until a meter total (`read`) is `expected` and has stayed so: Stripe aggregates meter events
 * asynchronously, so the first time a total shows a value is not the end of it (an event counted
 * twice shows later). On Stripe the value must hold for 30 s; the emulator's totals are final at once.
 */
export async function expectSettledTotal(read: () => Promise<number>, expected: number, what: string): Promise<void> {
  const holdMs = onEmulator ? 0 : 30_000;
  let since: number | undefined;
  let last: number | undefined;
  await waitUntil(
    async () => {
      last = await read();
      if (last !== expected) {
        since = undefined;
        return false;
      }
      since ??= Date.now();
      return Date.now() - since >= holdMs;
    },
    () => `${what} to settle at ${expected} (last read: ${last})`,
    onEmulator ? 5_000 : 180_000,
  );
}

/**
 * What `stripe listen --forward-to` does, for a Stripe test account (Stripe cannot reach a loopback
 * address): polls the account's events created since `start` and posts each one, oldest first, as
 * Stripe wrote it, to `target`, signed with `secret` (the app's STRIPE_WEBHOOK_SECRET, as the CLI
 * signs with its own). The platform's webhook route, job and checks then see events Stripe wrote.
 */
export class StripeEventRelay {
  readonly forwarded: string[] = [];
  readonly #stripe: Stripe;
  readonly #target: string;
  readonly #secret: string;
  readonly #since = Math.floor(Date.now() / 1000) - 5;
  #running = false;
  #loop: Promise<void> | undefined;

  constructor(stripe: Stripe, target: string, secret: string) {
    this.#stripe = stripe;
    this.#target = target;
    this.#secret = secret;
  }

  start(): this {
    this.#running = true;
    this.#loop = (async () => {
      while (this.#running) {
        await this.#forwardNew().catch(() => undefined);
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    })();
    return this;
  }

  async stop(): Promise<void> {
    this.#running = false;
    await this.#loop;
  }

  /** Whether every event the processor has listed so far has been forwarded. */
  async caughtUp(): Promise<boolean> {
    const events = await this.#listed();
    return events.every((event) => this.forwarded.includes(event.id));
  }

  async #listed(): Promise<Stripe.Event[]> {
    return (await this.#stripe.events.list({ created: { gte: this.#since }, limit: 100 })).data;
  }

  async #forwardNew(): Promise<void> {
    const events = { data: await this.#listed() };
    for (const event of events.data.toReversed()) {
      if (this.forwarded.includes(event.id)) continue;
      const payload = JSON.stringify(event);
      const response = await fetch(this.#target, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'stripe-signature': this.#stripe.webhooks.generateTestHeaderString({ payload, secret: this.#secret }) },
        body: payload,
      });
      await response.arrayBuffer();
      if (response.ok) this.forwarded.push(event.id);
    }
  }
}
