import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StripePaymentProcessor } from '../../src/adapters/stripe.ts';
import { completeCheckoutSession } from '../../dev/stripe/complete-checkout.ts';
import { waitUntil } from '../helpers/net.ts';
import { expectSettledTotal, onEmulator, startStripeTarget, WebhookReceiver, type StripeTarget } from '../helpers/stripe.ts';

/**
 * The Stripe emulator through the real `stripe` SDK. The first block runs against a Stripe
 * test-mode account too (`STRIPE_SECRET_KEY=sk_test_… make test-billing`);
 * the second needs what only the emulator gives: Checkout completed without a browser, webhooks
 * to a loopback address and a billing period that ends at once.
 */
let target: StripeTarget;
let stripe: Stripe;
const run = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
const PRICES = { currency: 'usd', unitAmountDecimal: { gpu_instance_seconds: '0.05', hosted_tokens: '0.0002' } };

beforeAll(async () => {
  target = await startStripeTarget();
  stripe = target.stripe;
});
afterAll(() => target.stop());

const processor = () => new StripePaymentProcessor({ secretKey: target.secretKey, webhookSecret: 'whsec_unused', apiUrl: target.apiUrl });
const newCustomer = (name: string, extra: Stripe.CustomerCreateParams = {}) => stripe.customers.create({ name, email: `${name}-${run}@example.com`, ...extra });

describe('Stripe emulator through the stripe SDK (also against Stripe test mode)', () => {
  it('sets up payment: a saved card made the default, then a subscription to metered prices is active with a paid $0 first invoice', async () => {
    const customer = await newCustomer('setup');
    const card = await stripe.paymentMethods.attach('pm_card_visa', { customer: customer.id });
    expect(card).toMatchObject({ customer: customer.id, type: 'card', card: { brand: 'visa', last4: '4242' } });
    const updated = await stripe.customers.update(customer.id, { invoice_settings: { default_payment_method: card.id }, expand: ['invoice_settings.default_payment_method'] });
    expect(updated.invoice_settings.default_payment_method).toMatchObject({ id: card.id, object: 'payment_method' });

    const prices = await processor().ensureMeterPrices(PRICES);
    const subscription = await stripe.subscriptions.create({ customer: customer.id, items: prices.map((price) => ({ price: price.priceId })), expand: ['latest_invoice'] });
    expect(subscription.status).toBe('active');
    expect(subscription.items.data.map((item) => item.price.recurring)).toEqual(prices.map((price) => expect.objectContaining({ usage_type: 'metered', meter: price.meterId })));
    expect(subscription.items.data[0]?.current_period_end).toBeGreaterThan(subscription.items.data[0]?.current_period_start ?? Infinity);
    expect(subscription.latest_invoice).toMatchObject({ object: 'invoice', status: 'paid', amount_due: 0, billing_reason: 'subscription_create' });
  });

  it('refuses a card that is declined with 402 card_declined, and saves nothing', async () => {
    const customer = await newCustomer('declined');
    const refused = await stripe.paymentMethods.attach('pm_card_chargeDeclined', { customer: customer.id }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(Stripe.errors.StripeCardError);
    expect(refused).toMatchObject({ statusCode: 402, code: 'card_declined' });
    expect((await stripe.customers.listPaymentMethods(customer.id)).data).toEqual([]);
  });

  it('detaches a card: it leaves the list and stops being the default; a detached card cannot become the default', async () => {
    const customer = await newCustomer('detach');
    const card = await stripe.paymentMethods.attach('pm_card_visa', { customer: customer.id });
    await stripe.customers.update(customer.id, { invoice_settings: { default_payment_method: card.id } });
    expect(await stripe.paymentMethods.detach(card.id)).toMatchObject({ id: card.id, customer: null });
    expect((await stripe.customers.listPaymentMethods(customer.id)).data).toEqual([]);
    expect((await stripe.customers.retrieve(customer.id)) as Stripe.Customer).toMatchObject({ invoice_settings: { default_payment_method: null } });
    await expect(stripe.customers.update(customer.id, { invoice_settings: { default_payment_method: card.id } })).rejects.toMatchObject({ statusCode: 400, type: 'StripeInvalidRequestError' });
    await expect(stripe.paymentMethods.detach(card.id)).rejects.toMatchObject({ statusCode: 400 });
  });

  it('replays a request sent again with its idempotency key, and refuses the key with other parameters', async () => {
    const key = `idem-${run}`;
    const first = await stripe.customers.create({ name: 'idempotent', metadata: { run } }, { idempotencyKey: key });
    const again = await stripe.customers.create({ name: 'idempotent', metadata: { run } }, { idempotencyKey: key });
    expect(again.id).toBe(first.id);
    expect(again.lastResponse.headers['idempotent-replayed']).toBe('true');
    const mismatch = await stripe.customers.create({ name: 'someone else', metadata: { run } }, { idempotencyKey: key }).catch((error: unknown) => error);
    expect(mismatch).toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
    expect(mismatch).toMatchObject({ statusCode: 400, message: expect.stringContaining('same parameters') });
  });

  it('refuses a meter event identifier it accepted before with 400, and counts the event once in the summary', async () => {
    const customer = await newCustomer('meter');
    const [gpu] = await processor().ensureMeterPrices(PRICES);
    const minute = Math.floor(Date.now() / 60_000) * 60;
    const report = (identifier: string, value: string) =>
      stripe.billing.meterEvents.create({ event_name: 'gpu_instance_seconds', identifier, timestamp: minute, payload: { stripe_customer_id: customer.id, value } });
    await report(`a-${run}`, '60');
    // Stripe enforces the identifier's uniqueness (over at least 24 hours) by refusing a repeat.
    const repeat = await report(`a-${run}`, '60').catch((error: unknown) => error);
    expect(repeat).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
    expect(repeat).toMatchObject({ statusCode: 400, message: `An event already exists with identifier a-${run}.` });
    await report(`b-${run}`, '15');
    const total = async () => {
      const summaries = await stripe.billing.meters.listEventSummaries(gpu?.meterId ?? '', { customer: customer.id, start_time: minute - 3600, end_time: minute + 3600 });
      return summaries.data.reduce((sum, summary) => sum + Number(summary.aggregated_value), 0);
    };
    // Stripe aggregates in the background: poll (the emulator answers at once).
    await expectSettledTotal(total, 75, 'the meter summary');
  });

  it('takes only whole-number values and identifiers of at most 100 characters', async () => {
    const customer = await newCustomer('meter-values');
    await processor().ensureMeterPrices(PRICES);
    const report = (identifier: string, value: string) => stripe.billing.meterEvents.create({ event_name: 'gpu_instance_seconds', identifier, payload: { stripe_customer_id: customer.id, value } });
    await expect(report(`decimal-${run}`, '1.5')).rejects.toMatchObject({ statusCode: 400 });
    await expect(report(`x${run}`.padEnd(101, 'x'), '1')).rejects.toMatchObject({ statusCode: 400, param: 'identifier' });
    await expect(report(`x${run}`.padEnd(100, 'x'), '1')).resolves.toMatchObject({ identifier: `x${run}`.padEnd(100, 'x') });
    await expect(report(`negative-${run}`, '-5')).resolves.toMatchObject({ payload: { value: '-5' } });
  });

  it('refuses an unknown parameter and a missing one the way Stripe does', async () => {
    await expect(stripe.customers.create({ name: 'x', colour: 'blue' } as Stripe.CustomerCreateParams)).rejects.toMatchObject({ statusCode: 400, code: 'parameter_unknown', param: 'colour' });
    await expect(stripe.billing.meters.create({ display_name: 'x' } as Stripe.Billing.MeterCreateParams)).rejects.toMatchObject({ statusCode: 400, code: 'parameter_missing' });
    await expect(stripe.customers.retrieve('cus_doesnotexist')).rejects.toMatchObject({ statusCode: 404, code: 'resource_missing' });
    const product = await stripe.products.create({ name: `unknown-${run}` });
    const nested = { currency: 'usd', product: product.id, unit_amount: 1, recurring: { interval: 'month', colour: 'blue' } } as Stripe.PriceCreateParams;
    await expect(stripe.prices.create(nested)).rejects.toMatchObject({ statusCode: 400, code: 'parameter_unknown', param: 'recurring[colour]' });
  });

  it('pages lists newest first with has_more and starting_after', async () => {
    const email = `paged-${run}@example.com`;
    const created = [];
    for (const name of ['one', 'two', 'three']) created.push(await stripe.customers.create({ name, email }));
    const first = await stripe.customers.list({ email, limit: 2 });
    expect(first.data.map((c) => c.name)).toEqual(['three', 'two']);
    expect(first.has_more).toBe(true);
    const next = await stripe.customers.list({ email, limit: 2, starting_after: first.data[1]?.id });
    expect(next.data.map((c) => c.name)).toEqual(['one']);
    expect(next.has_more).toBe(false);
  });

  it('lists the events of a time range (created[gte], created[lt]), as a relay polls them', async () => {
    const customer = await newCustomer('events');
    const ofCustomer = (events: Stripe.Event[]) => events.filter((event) => (event.data.object as { id?: string }).id === customer.id);
    let event: Stripe.Event | undefined;
    await waitUntil(async () => Boolean((event = ofCustomer((await stripe.events.list({ type: 'customer.created', limit: 100 })).data)[0])), 'the customer.created event');
    const created = event?.created ?? 0;
    const since = await stripe.events.list({ created: { gte: created }, limit: 100 });
    expect(since.data.every((e) => e.created >= created)).toBe(true);
    expect(ofCustomer(since.data).map((e) => e.id)).toContain(event?.id);
    const before = await stripe.events.list({ created: { lt: created }, limit: 100 });
    expect(before.data.every((e) => e.created < created)).toBe(true);
    expect(ofCustomer(before.data)).toEqual([]);
  });

  it('refuses a wrong secret key with 401', async () => {
    const stranger = new Stripe('sk_test_not_the_key', target.apiUrl ? { host: new URL(target.apiUrl).hostname, port: Number(new URL(target.apiUrl).port), protocol: 'http' } : {});
    await expect(stranger.customers.list()).rejects.toBeInstanceOf(Stripe.errors.StripeAuthenticationError);
  });
});

describe.runIf(onEmulator)('Stripe emulator: Checkout, invoices and webhooks (emulator only)', () => {
  const receiver = new WebhookReceiver();
  let webhookSecret: string;

  beforeAll(async () => {
    await receiver.start();
    const endpoint = await stripe.webhookEndpoints.create({ url: receiver.url, enabled_events: ['*'] });
    webhookSecret = endpoint.secret ?? '';
  });
  afterAll(() => receiver.stop());

  const eventsAbout = async (id: string, types: string[]) => {
    await waitUntil(async () => types.every((type) => receiver.about(id).some((webhook) => webhook.event.type === type)), `${types.join(', ')} about ${id}`, 5_000);
    return receiver.about(id);
  };

  it('completes a setup Checkout Session with 4242 on its page: the card is attached and checkout.session.completed is sent', async () => {
    const customer = await newCustomer('checkout');
    const session = await stripe.checkout.sessions.create({ mode: 'setup', customer: customer.id, currency: 'usd', success_url: 'https://app.example.com/billing?session={CHECKOUT_SESSION_ID}' });
    expect(session).toMatchObject({ mode: 'setup', status: 'open', payment_status: 'no_payment_required', url: expect.stringContaining('/checkout/cs_test_') });
    const page = await fetch(session.url ?? '');
    expect(await page.text()).toContain('4242 4242 4242 4242');

    const completion = await completeCheckoutSession(session.url ?? '');
    expect(completion).toMatchObject({ status: 303, redirect: `https://app.example.com/billing?session=${session.id}` });
    const completed = await stripe.checkout.sessions.retrieve(session.id, { expand: ['setup_intent'] });
    expect(completed.status).toBe('complete');
    const intent = completed.setup_intent as Stripe.SetupIntent;
    expect(intent).toMatchObject({ status: 'succeeded', customer: customer.id });
    const cards = await stripe.customers.listPaymentMethods(customer.id);
    expect(cards.data.map((pm) => [pm.id, pm.card?.last4])).toEqual([[intent.payment_method, '4242']]);

    const [webhook] = await eventsAbout(session.id, ['checkout.session.completed']);
    const event = stripe.webhooks.constructEvent(webhook?.payload ?? '', webhook?.signature ?? '', webhookSecret);
    expect(event).toMatchObject({ type: 'checkout.session.completed', api_version: Stripe.API_VERSION, data: { object: { id: session.id, status: 'complete' } } });
    await eventsAbout(intent.id, ['setup_intent.succeeded']);
  });

  it('leaves the session open when the card is declined (4000 0000 0000 0002), with the reason on the page', async () => {
    const customer = await newCustomer('checkout-declined');
    const session = await stripe.checkout.sessions.create({ mode: 'setup', customer: customer.id, currency: 'usd', success_url: 'https://app.example.com/ok' });
    const completion = await completeCheckoutSession(session.url ?? '', { number: '4000 0000 0000 0002', expiry: '12 / 34', cvc: '123' });
    expect(completion.status).toBe(402);
    expect(completion.page).toContain('Your card was declined.');
    expect((await stripe.checkout.sessions.retrieve(session.id)).status).toBe('open');
    const intent = await stripe.setupIntents.retrieve(session.setup_intent as string);
    expect(intent).toMatchObject({ status: 'requires_payment_method', last_setup_error: { code: 'card_declined', decline_code: 'generic_decline' } });
    expect((await stripe.customers.listPaymentMethods(customer.id)).data).toEqual([]);
  });

  /** A customer on a test clock with a default card and a subscription to both metered prices. */
  async function subscribed(name: string, card: string) {
    const start = Math.floor(Date.now() / 1000);
    const clock = await stripe.testHelpers.testClocks.create({ frozen_time: start });
    const customer = await newCustomer(name, { test_clock: clock.id });
    const paymentMethod = await stripe.paymentMethods.attach(card, { customer: customer.id });
    await stripe.customers.update(customer.id, { invoice_settings: { default_payment_method: paymentMethod.id } });
    const prices = await processor().ensureMeterPrices(PRICES);
    const subscription = await stripe.subscriptions.create({ customer: customer.id, items: prices.map((price) => ({ price: price.priceId })) });
    return { clock, customer, subscription, start };
  }

  async function advance(clock: Stripe.TestHelpers.TestClock, to: number) {
    const advancing = await stripe.testHelpers.testClocks.advance(clock.id, { frozen_time: to });
    expect(advancing.status).toBe('advancing');
    await waitUntil(async () => (await stripe.testHelpers.testClocks.retrieve(clock.id)).status === 'ready', 'the test clock to be ready', 5_000);
  }

  it('invoices a period from the meters when a test clock passes its end: invoice.created, invoice.finalized and invoice.paid, with its page and PDF', async () => {
    const { clock, customer, subscription, start } = await subscribed('cycle', 'pm_card_visa');
    await stripe.billing.meterEvents.create({ event_name: 'gpu_instance_seconds', timestamp: start + 60, payload: { stripe_customer_id: customer.id, value: '3600' } });
    await stripe.billing.meterEvents.create({ event_name: 'hosted_tokens', timestamp: start + 120, payload: { stripe_customer_id: customer.id, value: '50000' } });
    await advance(clock, start + 32 * 86_400);

    const invoices = await stripe.invoices.list({ customer: customer.id });
    const [cycle] = invoices.data.filter((invoice) => invoice.billing_reason === 'subscription_cycle');
    // 3600 s × 0.05 ¢ + 50 000 tokens × 0.0002 ¢ = 180 + 10 cents.
    expect(cycle).toMatchObject({ status: 'paid', amount_due: 190, amount_paid: 190, collection_method: 'charge_automatically', parent: { subscription_details: { subscription: subscription.id } } });
    const events = await eventsAbout(cycle?.id ?? '', ['invoice.created', 'invoice.finalized', 'invoice.paid']);
    expect(events.map((webhook) => webhook.event.type)).toEqual(['invoice.created', 'invoice.finalized', 'invoice.paid', 'invoice.payment_succeeded']);
    for (const webhook of events) expect(stripe.webhooks.constructEvent(webhook.payload, webhook.signature ?? '', webhookSecret).id).toBe(webhook.event.id);

    const page = await fetch(cycle?.hosted_invoice_url ?? '');
    expect(page.status).toBe(200);
    const pdf = await fetch(cycle?.invoice_pdf ?? '');
    expect(pdf.headers.get('content-type')).toBe('application/pdf');
    expect(Buffer.from(await pdf.arrayBuffer()).subarray(0, 5).toString()).toBe('%PDF-');
    const renewed = await stripe.subscriptions.retrieve(subscription.id);
    expect(renewed.items.data[0]?.current_period_start).toBe(subscription.items.data[0]?.current_period_end);
  });

  it('accepts a meter event identifier again once its 24-hour uniqueness window is over, as a new event counted again', async () => {
    const { clock, customer, start } = await subscribed('window', 'pm_card_visa');
    const [gpu] = await processor().ensureMeterPrices(PRICES);
    const report = (timestamp: number) =>
      stripe.billing.meterEvents.create({ event_name: 'gpu_instance_seconds', identifier: `window-${run}`, timestamp, payload: { stripe_customer_id: customer.id, value: '7' } });
    await report(start + 60);
    await advance(clock, start + 86_400 - 60);
    await expect(report(start + 120)).rejects.toMatchObject({ statusCode: 400 });
    await advance(clock, start + 86_400 + 60);
    await report(start + 180);
    const minute = Math.floor(start / 60) * 60;
    const summaries = await stripe.billing.meters.listEventSummaries(gpu?.meterId ?? '', { customer: customer.id, start_time: minute, end_time: minute + 3600 });
    expect(summaries.data.reduce((sum, summary) => sum + Number(summary.aggregated_value), 0)).toBe(14);
  });

  it('cancels a meter event by its identifier with a meter event adjustment within 24 hours of receiving it, and not after', async () => {
    const { clock, customer, start } = await subscribed('adjustment', 'pm_card_visa');
    const [gpu] = await processor().ensureMeterPrices(PRICES);
    const report = (identifier: string, timestamp: number) =>
      stripe.billing.meterEvents.create({ event_name: 'gpu_instance_seconds', identifier, timestamp, payload: { stripe_customer_id: customer.id, value: '5' } });
    const cancel = (identifier: string) => stripe.billing.meterEventAdjustments.create({ event_name: 'gpu_instance_seconds', type: 'cancel', cancel: { identifier } });
    await report(`early-${run}`, start + 60);
    await report(`kept-${run}`, start + 120);
    await advance(clock, start + 86_400 + 60);
    await report(`late-${run}`, start + 86_400);
    expect(await cancel(`late-${run}`)).toMatchObject({ object: 'billing.meter_event_adjustment', status: 'pending', cancel: { identifier: `late-${run}` } });
    // Received over 24 hours ago: no longer cancelled.
    await cancel(`early-${run}`);
    const day = Math.floor(start / 86_400) * 86_400;
    const summaries = await stripe.billing.meters.listEventSummaries(gpu?.meterId ?? '', { customer: customer.id, start_time: day, end_time: day + 3 * 86_400 });
    expect(summaries.data.reduce((sum, summary) => sum + Number(summary.aggregated_value), 0)).toBe(10);
  });

  it('refuses a portal session until a configuration exists, as Stripe does on a fresh account; the processor creates one, once', async () => {
    const customer = await newCustomer('portal');
    await expect(stripe.billingPortal.sessions.create({ customer: customer.id })).rejects.toMatchObject({
      statusCode: 400,
      message: expect.stringContaining('until you save your customer portal settings'),
    });
    const first = await processor().createPortalSession({ customerId: customer.id, returnUrl: 'https://app.example.com/billing' });
    // Another process (a new processor) finds the configuration instead of making a second one.
    const second = await processor().createPortalSession({ customerId: customer.id, returnUrl: 'https://app.example.com/billing' });
    const ours = (await stripe.billingPortal.configurations.list({ limit: 100 })).data.filter((c) => c.metadata?.created_by === 'model-deployment-service');
    expect(ours).toEqual([expect.objectContaining({ active: true, is_default: false, features: expect.objectContaining({ invoice_history: { enabled: true } }) })]);
    for (const { url } of [first, second]) expect((await fetch(url)).status).toBe(200);
  });

  it('sends invoice.payment_failed when the default card fails its charges, and the subscription goes past_due; the invoice can be voided', async () => {
    const { clock, customer, subscription, start } = await subscribed('failing', 'pm_card_chargeCustomerFail');
    await stripe.billing.meterEvents.create({ event_name: 'gpu_instance_seconds', timestamp: start + 60, payload: { stripe_customer_id: customer.id, value: '100' } });
    await advance(clock, start + 32 * 86_400);
    const [cycle] = (await stripe.invoices.list({ customer: customer.id, status: 'open' })).data;
    expect(cycle).toMatchObject({ amount_due: 5, amount_paid: 0, attempted: true, attempt_count: 1 });
    await eventsAbout(cycle?.id ?? '', ['invoice.payment_failed']);
    expect((await stripe.subscriptions.retrieve(subscription.id)).status).toBe('past_due');
    await expect(stripe.invoices.pay(cycle?.id ?? '')).rejects.toMatchObject({ statusCode: 402, code: 'card_declined' });
    expect(await stripe.invoices.voidInvoice(cycle?.id ?? '')).toMatchObject({ status: 'void' });
    await eventsAbout(cycle?.id ?? '', ['invoice.voided']);
    await expect(stripe.invoices.voidInvoice(cycle?.id ?? '')).rejects.toMatchObject({ statusCode: 400 });
  });

  it('sends invoices for collection when the collection method is send_invoice: open, with a due date', async () => {
    const { clock, customer, subscription, start } = await subscribed('send-invoice', 'pm_card_visa');
    await expect(stripe.subscriptions.update(subscription.id, { collection_method: 'send_invoice' })).rejects.toMatchObject({ code: 'parameter_missing', param: 'days_until_due' });
    await stripe.subscriptions.update(subscription.id, { collection_method: 'send_invoice', days_until_due: 14 });
    await advance(clock, start + 32 * 86_400);
    const [cycle] = (await stripe.invoices.list({ customer: customer.id, collection_method: 'send_invoice' })).data;
    expect(cycle).toMatchObject({ status: 'open', collection_method: 'send_invoice', due_date: (cycle?.created ?? 0) + 14 * 86_400 });
  });

  it('sends customer.subscription.created, then customer.subscription.deleted when the subscription is canceled', async () => {
    const { subscription } = await subscribed('canceled', 'pm_card_visa');
    const canceled = await stripe.subscriptions.cancel(subscription.id);
    expect(canceled).toMatchObject({ status: 'canceled', canceled_at: expect.any(Number) });
    const events = await eventsAbout(subscription.id, ['customer.subscription.created', 'customer.subscription.deleted']);
    expect(events.map((webhook) => webhook.event.type)).toEqual(['customer.subscription.created', 'customer.subscription.deleted']);
    expect((await stripe.subscriptions.list({ customer: canceled.customer as string })).data).toEqual([]);
  });

  it('signs webhooks so constructEvent verifies them, and a tampered payload or a stale signature fails', async () => {
    const customer = await newCustomer('signed');
    const [webhook] = await eventsAbout(customer.id, ['customer.created']);
    const payload = webhook?.payload ?? '';
    const signature = webhook?.signature ?? '';
    expect(signature).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
    expect(stripe.webhooks.constructEvent(payload, signature, webhookSecret)).toMatchObject({ object: 'event', type: 'customer.created', data: { object: { id: customer.id } } });
    const tampered = payload.replace(customer.id, 'cus_someoneelse');
    expect(() => stripe.webhooks.constructEvent(tampered, signature, webhookSecret)).toThrow(Stripe.errors.StripeSignatureVerificationError);
    expect(() => stripe.webhooks.constructEvent(payload, signature, 'whsec_another')).toThrow(Stripe.errors.StripeSignatureVerificationError);
    const port = new StripePaymentProcessor({ secretKey: target.secretKey, webhookSecret, apiUrl: target.apiUrl, webhookToleranceSeconds: 300 });
    expect(port.verifyWebhook(payload, signature)).toMatchObject({ type: 'customer.created', objectType: 'customer', objectId: customer.id });
    const stale = signature.replace(/^t=\d+/, `t=${Math.floor(Date.now() / 1000) - 3600}`);
    expect(() => port.verifyWebhook(payload, stale)).toThrow(/signature/i);
  });

  it('updates a webhook endpoint: its URL and events change, its signing secret stays; unknown parameters and ids are refused', async () => {
    const moved = await new WebhookReceiver().start();
    try {
      const created = await stripe.webhookEndpoints.create({ url: 'http://127.0.0.1:9/nowhere', enabled_events: ['invoice.paid'] });
      const updated = await stripe.webhookEndpoints.update(created.id, { url: moved.url, enabled_events: ['customer.created'], description: 'moved', metadata: { run } });
      expect(updated).toMatchObject({ id: created.id, url: moved.url, enabled_events: ['customer.created'], description: 'moved', metadata: { run }, status: 'enabled' });
      expect(await stripe.webhookEndpoints.retrieve(created.id)).toMatchObject({ url: moved.url, enabled_events: ['customer.created'] });

      // The endpoint now gets customer.created at its new URL, signed with the secret it was created with, and nothing else.
      const customer = await newCustomer('moved-endpoint');
      await waitUntil(async () => moved.about(customer.id).length > 0, 'customer.created at the updated URL', 5_000);
      const [webhook] = moved.about(customer.id);
      expect(stripe.webhooks.constructEvent(webhook?.payload ?? '', webhook?.signature ?? '', created.secret ?? '').type).toBe('customer.created');
      await stripe.customers.update(customer.id, { name: 'renamed' });
      await eventsAbout(customer.id, ['customer.updated']);
      expect(moved.about(customer.id).map((received) => received.event.type)).toEqual(['customer.created']);

      expect(await stripe.webhookEndpoints.update(created.id, { disabled: true })).toMatchObject({ status: 'disabled' });
      const unknown = { url: moved.url, api_version: '2020-08-27' } as Stripe.WebhookEndpointUpdateParams;
      await expect(stripe.webhookEndpoints.update(created.id, unknown)).rejects.toMatchObject({ statusCode: 400, code: 'parameter_unknown', param: 'api_version' });
      await expect(stripe.webhookEndpoints.update('we_doesnotexist', { url: moved.url })).rejects.toMatchObject({ statusCode: 404, code: 'resource_missing' });
      await stripe.webhookEndpoints.del(created.id);
    } finally {
      await moved.stop();
    }
  });

  it('retries a delivery that got no 2xx until the endpoint takes it, signing each attempt', async () => {
    receiver.refuseNext(2);
    const customer = await newCustomer('retried');
    const [webhook] = await eventsAbout(customer.id, ['customer.created']);
    // The emulator records an attempt once the endpoint's answer is in, which may be after the receiver has the event.
    const attempts = () => target.emulator?.deliveries.filter((delivery) => delivery.event_id === webhook?.event.id) ?? [];
    await waitUntil(async () => attempts().length === 3, () => `three attempts recorded (${attempts().map((attempt) => attempt.status)})`);
    expect(attempts().map((attempt) => attempt.status)).toEqual([500, 500, 200]);
    expect(stripe.webhooks.constructEvent(webhook?.payload ?? '', webhook?.signature ?? '', webhookSecret).id).toBe(webhook?.event.id);
  });
});
