import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StripePaymentProcessor } from '../../src/adapters/stripe.ts';
import { PaymentProcessorError, WebhookSignatureError } from '../../src/billing/payment-processor.ts';
import { checkoutPageUrl, completeCheckoutSession } from '../../dev/stripe/complete-checkout.ts';
import { freePort } from '../helpers/net.ts';
import { expectSettledTotal, onEmulator, startStripeTarget, type StripeTarget } from '../helpers/stripe.ts';

/**
 * The payment processor port on the `stripe` SDK, over the Stripe emulator (or Stripe test mode
 * with `STRIPE_SECRET_KEY=sk_test_… make test-billing`; completing Checkout needs the emulator).
 */
let target: StripeTarget;
let processor: StripePaymentProcessor;
const run = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
const PRICES = { currency: 'usd', unitAmountDecimal: { gpu_instance_seconds: '0.05', hosted_tokens: '0.0002' } };

beforeAll(async () => {
  target = await startStripeTarget();
  processor = new StripePaymentProcessor({ secretKey: target.secretKey, webhookSecret: 'whsec_test', apiUrl: target.apiUrl });
});
afterAll(() => target.stop());

const customerFor = (organizationId: number) => processor.ensureCustomer({ key: `org-${run}-${organizationId}`, organizationId, name: `Org ${organizationId}` });

describe('payment processor port (StripePaymentProcessor)', () => {
  it('creates one customer per organization key, however often it is asked', async () => {
    const first = await customerFor(1);
    expect(await customerFor(1)).toEqual(first);
    expect((await customerFor(2)).id).not.toBe(first.id);
    expect(await processor.getCustomer(first.id)).toEqual({ id: first.id, defaultPaymentMethodId: null });
  });

  it.runIf(onEmulator)('creates one setup Checkout Session per key; once completed, its SetupIntent holds the saved card', async () => {
    const customer = await customerFor(3);
    const input = { key: `setup-${run}`, customerId: customer.id, currency: 'usd', ui: 'hosted' as const, returnUrl: 'https://app.example.com/billing', metadata: { purpose: 'payment_method_setup' } };
    const session = await processor.createSetupCheckoutSession(input);
    expect(await processor.createSetupCheckoutSession(input)).toEqual(session);
    expect(session).toMatchObject({ mode: 'setup', status: 'open', paymentStatus: 'no_payment_required', customerId: customer.id, metadata: { purpose: 'payment_method_setup' } });
    expect(session.expiresAt.getTime()).toBeGreaterThan(Date.now());

    expect((await completeCheckoutSession(session.url ?? '')).status).toBe(303);
    const completed = await processor.getCheckoutSession(session.id);
    expect(completed.status).toBe('complete');
    const intent = await processor.getSetupIntent(completed.setupIntentId ?? '');
    expect(intent).toMatchObject({ status: 'succeeded', customerId: customer.id });
    expect(await processor.listPaymentMethods(customer.id)).toEqual([
      { id: intent.paymentMethodId, customerId: customer.id, brand: 'visa', last4: '4242', expMonth: 12, expYear: 2034, allowRedisplay: 'unspecified' },
    ]);
  });

  it.runIf(onEmulator)('creates an embedded setup session: a client secret and no page URL; completed, it returns to return_url', async () => {
    const customer = await customerFor(8);
    const session = await processor.createSetupCheckoutSession({
      key: `embedded-${run}`,
      customerId: customer.id,
      currency: 'usd',
      ui: 'embedded',
      returnUrl: 'https://app.example.com/billing?session={CHECKOUT_SESSION_ID}',
      metadata: { purpose: 'postpaid_activation' },
    });
    expect(session).toMatchObject({ url: null, clientSecret: expect.stringMatching(/^cs_test_\w+_secret_\w+$/), status: 'open' });
    const completion = await completeCheckoutSession(checkoutPageUrl(target.apiUrl ?? '', session.id));
    expect(completion).toMatchObject({ status: 303, redirect: `https://app.example.com/billing?session=${session.id}` });
    expect((await processor.getCheckoutSession(session.id)).status).toBe('complete');
  });

  it('sets the default card, detaches it, and refuses a detached card as default with a PaymentProcessorError', async () => {
    const customer = await customerFor(4);
    const card = await target.stripe.paymentMethods.attach('pm_card_visa', { customer: customer.id });
    expect(await processor.setDefaultPaymentMethod(customer.id, card.id)).toEqual({ id: customer.id, defaultPaymentMethodId: card.id });
    expect(await processor.getPaymentMethod(card.id)).toMatchObject({ id: card.id, customerId: customer.id, last4: '4242' });
    await processor.detachPaymentMethod(card.id);
    expect(await processor.listPaymentMethods(customer.id)).toEqual([]);
    expect((await processor.getCustomer(customer.id)).defaultPaymentMethodId).toBeNull();
    const refused = await processor.setDefaultPaymentMethod(customer.id, card.id).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(PaymentProcessorError);
    expect(refused).toMatchObject({ processorStatus: 400 });
  });

  it('ensures the meters and their prices once, and makes a new price when an amount changes', async () => {
    const prices = await processor.ensureMeterPrices(PRICES);
    expect(prices.map((price) => price.meter)).toEqual(['gpu_instance_seconds', 'hosted_tokens']);
    expect(await processor.ensureMeterPrices(PRICES)).toEqual(prices);
    const raised = await processor.ensureMeterPrices({ ...PRICES, unitAmountDecimal: { ...PRICES.unitAmountDecimal, hosted_tokens: '0.0003' } });
    expect(raised[0]).toEqual(prices[0]);
    expect(raised[1]).toMatchObject({ meterId: prices[1]?.meterId, unitAmountDecimal: '0.0003' });
    expect(raised[1]?.priceId).not.toBe(prices[1]?.priceId);
    // Back to the first amount for the other tests: the lookup key moves again.
    await processor.ensureMeterPrices(PRICES);
  });

  it('subscribes once per key to the metered prices, switches the collection method, and lists the paid $0 first invoice', async () => {
    const customer = await customerFor(5);
    const card = await target.stripe.paymentMethods.attach('pm_card_visa', { customer: customer.id });
    await processor.setDefaultPaymentMethod(customer.id, card.id);
    const prices = await processor.ensureMeterPrices(PRICES);
    const input = { key: `account-${run}-5`, customerId: customer.id, priceIds: prices.map((price) => price.priceId), metadata: { billing_account_id: '5' } };
    const subscription = await processor.createSubscription(input);
    expect(await processor.createSubscription(input)).toEqual(subscription);
    expect(subscription).toMatchObject({ customerId: customer.id, status: 'active', collectionMethod: 'charge_automatically' });
    expect(subscription.items.map((item) => item.meterId)).toEqual(prices.map((price) => price.meterId));
    expect(subscription.currentPeriodEnd.getTime()).toBeGreaterThan(subscription.currentPeriodStart.getTime());

    expect(await processor.setCollectionMethod(subscription.id, 'send_invoice', 14)).toMatchObject({ collectionMethod: 'send_invoice' });
    expect(await processor.setCollectionMethod(subscription.id, 'charge_automatically')).toMatchObject({ collectionMethod: 'charge_automatically' });
    expect(await processor.getSubscription(subscription.id)).toMatchObject({ id: subscription.id, collectionMethod: 'charge_automatically' });

    const { invoices, hasMore } = await processor.listInvoices(customer.id);
    expect(hasMore).toBe(false);
    expect(invoices).toEqual([
      expect.objectContaining({ subscriptionId: subscription.id, status: 'paid', amountDue: 0, currency: 'usd', hostedInvoiceUrl: expect.any(String), invoicePdf: expect.any(String) }),
    ]);
    expect(await processor.getInvoice(invoices[0]?.id ?? '')).toEqual(invoices[0]);
  });

  it('reports meter events, tells a repeated identifier Stripe refuses as a duplicate, and reads the meter total back', async () => {
    const customer = await customerFor(6);
    const [gpu] = await processor.ensureMeterPrices(PRICES);
    const minute = new Date(Math.floor(Date.now() / 60_000) * 60_000);
    const outcomes = [];
    for (const identifier of [`r1-${run}`, `r1-${run}`, `r2-${run}`]) {
      outcomes.push(await processor.reportMeterEvent({ meter: 'gpu_instance_seconds', customerId: customer.id, value: 30, identifier, timestamp: minute }));
    }
    expect(outcomes).toEqual(['accepted', 'duplicate', 'accepted']);
    const window = { meterId: gpu?.meterId ?? '', customerId: customer.id, start: new Date(minute.getTime() - 3_600_000), end: new Date(minute.getTime() + 3_600_000) };
    await expectSettledTotal(() => processor.meterTotal(window), 60, 'the meter total');
  });

  it('opens a customer portal session', async () => {
    const customer = await customerFor(7);
    const { url } = await processor.createPortalSession({ customerId: customer.id, returnUrl: 'https://app.example.com/billing' });
    expect(url).toMatch(/^https?:\/\//);
    if (onEmulator) expect((await fetch(url)).status).toBe(200);
  });

  it('refuses a webhook without a signature with WebhookSignatureError', () => {
    expect(() => processor.verifyWebhook('{}', undefined)).toThrow(WebhookSignatureError);
  });

  it.runIf(onEmulator)('turns an unreachable processor into a PaymentProcessorError', async () => {
    const port = await freePort();
    const unreachable = new StripePaymentProcessor({ secretKey: target.secretKey, webhookSecret: 'whsec_test', apiUrl: `http://127.0.0.1:${port}` });
    await expect(unreachable.getCustomer('cus_x')).rejects.toBeInstanceOf(PaymentProcessorError);
  });
});
