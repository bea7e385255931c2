import { randomBytes } from 'node:crypto';
import type Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { CARDS } from '../factories/billing.ts';
import { APP_ORIGIN, startTestApp, type TestApp } from '../helpers/app.ts';
import { completeCheckoutInBrowser } from '../helpers/checkout-browser.ts';
import { chromiumMissing } from '../helpers/chromium.ts';
import { waitUntil } from '../helpers/net.ts';
import { onEmulator, startStripeTarget, StripeEventRelay, type StripeTarget } from '../helpers/stripe.ts';

/**
 * The platform's billing over HTTP end to end, in `make test` on the Stripe emulator and in `make
 * test-billing` on a Stripe test account: a setup session through the API,
 * Checkout completed in a browser with a test card, the signed webhook, the worker, the
 * subscription; then a replayed event and an older one delivered last. On a test account, Stripe.js
 * mounts Stripe's embedded Checkout (STRIPE_TEST_PUBLISHABLE_KEY). In both, the events reach the
 * app's webhook route through a relay that does what `stripe listen` does (Stripe cannot reach
 * loopback), so the same code runs on the emulator as on Stripe; the emulator's own webhook
 * deliveries are billing.test.ts's.
 */
const publishableKey = process.env.STRIPE_TEST_PUBLISHABLE_KEY || undefined;
const missing = chromiumMissing || (onEmulator || publishableKey ? '' : ' (SKIPPED: STRIPE_TEST_PUBLISHABLE_KEY is not set)');
/** How long Stripe may take to send an event and the worker to process it. */
const SETTLING_MS = onEmulator ? 20_000 : 120_000;

let app: TestApp;
let target: StripeTarget;
let stripe: Stripe;
let relay: StripeEventRelay;
let owner: SignedInUser;

beforeAll(async () => {
  if (missing) return;
  target = await startStripeTarget();
  stripe = target.stripe;
  // Events reach the webhook route through the relay in both modes (the emulator has no endpoint here), signed with a secret of the test's.
  const secret = `whsec_${randomBytes(24).toString('base64')}`;
  const settings = { STRIPE_SECRET_KEY: target.secretKey, STRIPE_PUBLISHABLE_KEY: target.emulator?.publishableKey ?? publishableKey ?? '', STRIPE_WEBHOOK_SECRET: secret };
  app = await startTestApp(target.apiUrl ? { ...settings, STRIPE_API_URL: target.apiUrl } : settings, { workers: true });
  relay = new StripeEventRelay(stripe, `${app.url}/v1/billing/webhook`, secret).start();
}, 120_000);
afterAll(async () => {
  await relay?.stop();
  await app?.close();
  await target?.stop();
});

const signed = (payload: string) => stripe.webhooks.generateTestHeaderString({ payload, secret: app.env.STRIPE_WEBHOOK_SECRET ?? '' });
const postEvent = (payload: string) => fetch(`${app.url}/v1/billing/webhook`, { method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': signed(payload) }, body: payload });
const account = async () => (await owner.api.GET('/v1/billing/account')).data;

/** The events of the processor about the owner's customer, oldest first (Stripe lists newest first). */
async function eventsOfCustomer(customerId: string, type: string): Promise<Stripe.Event[]> {
  const { data } = await stripe.events.list({ type, limit: 100 });
  return data.filter((event) => (event.data.object as { customer?: unknown }).customer === customerId).toReversed();
}

/** Waits until the worker processed the event (the job re-reads its object from the processor). */
const processed = (eventId: string) =>
  waitUntil(async () => Boolean((await app.db('billing_webhook_events').where({ id: eventId }).first())?.processed_at), `event ${eventId} processed`, SETTLING_MS);

/** Waits until every event sent so far reached the webhook route and the worker processed it, so nothing changes the account behind a comparison. */
const settled = () =>
  waitUntil(
    async () => (await relay.caughtUp()) && (await app.db('billing_webhook_events').whereNull('processed_at').first()) === undefined,
    'every event forwarded and processed',
    SETTLING_MS,
  );

describe.skipIf(Boolean(missing))(`billing over HTTP, Checkout in a browser, on ${onEmulator ? 'the Stripe emulator' : 'a Stripe test account'}${missing}`, () => {
  it('goes from a setup session to Checkout in a browser, the signed webhook, the worker and an active subscription', async () => {
    owner = await registeredUser(app);
    const { data: session, response } = await owner.api.POST('/v1/billing/checkout/setup-session', { body: { purpose: 'postpaid_activation', return_url: `${APP_ORIGIN}/settings/billing` } });
    expect(response.status).toBe(201);
    expect(session).toMatchObject({ mode: 'setup', status: 'open', checkout_session_id: expect.stringMatching(/^cs_/) });

    await completeCheckoutInBrowser({ session: session as { checkout_session_id: string; client_secret: string }, emulatorUrl: target.emulator?.url, publishableKey, card: CARDS.visa });
    await waitUntil(async () => (await owner.api.GET('/v1/billing/subscription')).data?.subscription_status === 'active', 'the subscription to be active', SETTLING_MS);

    const { data: cards } = await owner.api.GET('/v1/billing/payment-methods');
    expect(cards).toEqual([expect.objectContaining({ brand: 'visa', last4: '4242', is_default: true })]);
    const customerId = (await account())?.processor_customer_id ?? '';
    const subscriptions = await stripe.subscriptions.list({ customer: customerId });
    expect(subscriptions.data.map((s) => s.id)).toEqual([(await account())?.processor_subscription_id]);
    // The completion came as a webhook, as the processor wrote it, and the worker processed it.
    const [completed] = (await stripe.events.list({ type: 'checkout.session.completed', limit: 100 })).data.filter(
      (event) => (event.data.object as Stripe.Checkout.Session).id === session?.checkout_session_id,
    );
    expect(completed).toBeDefined();
    await processed(completed?.id ?? '');
  });

  it('acknowledges a replayed event and changes nothing twice', async () => {
    const customerId = (await account())?.processor_customer_id ?? '';
    const [completed] = await eventsOfCustomer(customerId, 'checkout.session.completed');
    if (!completed) throw new Error('no checkout.session.completed event of the customer');
    await settled();
    const before = await account();
    const rows = () => app.db('billing_webhook_events').where({ id: completed.id });
    expect(await rows()).toHaveLength(1);

    const replay = await postEvent(JSON.stringify(completed));
    expect(replay.status).toBe(200);
    expect(await replay.json()).toEqual({ received: true });
    expect(await rows()).toHaveLength(1);
    expect(await account()).toEqual(before);
    expect((await stripe.subscriptions.list({ customer: customerId })).data).toHaveLength(1);
  });

  it('keeps the current state when an older event of the subscription comes last', async () => {
    const switched = await owner.api.PATCH('/v1/billing/subscription/collection-method', { body: { collection_method: 'send_invoice' } });
    expect(switched.response.status).toBe(200);
    const customerId = (await account())?.processor_customer_id ?? '';
    await waitUntil(async () => (await eventsOfCustomer(customerId, 'customer.subscription.updated')).length > 0, 'the subscription.updated event', SETTLING_MS);
    const [updated] = (await eventsOfCustomer(customerId, 'customer.subscription.updated')).toReversed();
    await processed(updated?.id ?? '');
    const [created] = await eventsOfCustomer(customerId, 'customer.subscription.created');
    if (!created) throw new Error('no customer.subscription.created event of the customer');
    expect((created.data.object as Stripe.Subscription).collection_method).toBe('charge_automatically');

    // The subscription's first event, delivered (as Stripe may) after the later one, under a new id.
    const late = { ...created, id: `${created.id}_late` };
    expect((await postEvent(JSON.stringify(late))).status).toBe(200);
    await processed(late.id);
    expect(await account()).toMatchObject({ collection_method: 'send_invoice', subscription_status: 'active' });
  });
});
