import type Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { CARDS, checkoutWithCard, webhooksSettled as settled } from '../factories/billing.ts';
import { addedMember } from '../factories/organizations.ts';
import { APP_ORIGIN, startTestApp, type TestApp } from '../helpers/app.ts';
import type { Api } from '../helpers/browser.ts';
import { waitUntil } from '../helpers/net.ts';
import { operatorCliIn } from '../helpers/operator-cli.ts';
import { createLogger } from '../../src/logger.ts';

/**
 * Billing through the real HTTP interface, with the Stripe emulator as the payment processor (the
 * service calls it through the `stripe` SDK, the emulator's webhooks come to the service's route,
 * signed as Stripe signs them, and a worker processes them).
 */
let app: TestApp;
let stripe: Stripe;
let emulatorUrl: string;
beforeAll(async () => {
  app = await startTestApp({}, { workers: true, stripe: true });
  if (!app.stripe) throw new Error('no emulator');
  stripe = app.stripe.sdk;
  emulatorUrl = app.stripe.emulator.url;
});
afterAll(() => app.close());

const account = async (api: Api) => (await api.GET('/v1/billing/account')).data;
const cards = async (api: Api) => (await api.GET('/v1/billing/payment-methods')).data ?? [];
const invoices = async (api: Api) => (await api.GET('/v1/billing/invoices')).data ?? [];

/** Saves a card through the emulator's Checkout page (test/factories/billing.ts), checking each step. */
async function saveCard(owner: SignedInUser, purpose: 'payment_method_setup' | 'postpaid_activation', card = CARDS.visa) {
  const { session, status, completion } = await checkoutWithCard(app, owner, purpose, card);
  expect(status).toBe(201);
  expect(session).toMatchObject({ mode: 'setup', status: 'open', payment_status: 'no_payment_required', client_secret: expect.stringMatching(/_secret_/) });
  expect(completion.status).toBe(303);
  expect(completion.redirect).toBe(`${APP_ORIGIN}/billing`);
  return session.checkout_session_id;
}

const webhooksSettled = () => settled(app);

/** An activated organization: a card saved through checkout and an active subscription. */
async function activatedOwner(): Promise<SignedInUser> {
  const owner = await registeredUser(app);
  await saveCard(owner, 'postpaid_activation');
  await waitUntil(async () => (await owner.api.GET('/v1/billing/subscription')).data?.subscription_status === 'active', 'subscription active');
  return owner;
}

describe('billing config', () => {
  it('gives the publishable key and the features this server has (enforcement: on by default with a processor)', async () => {
    const owner = await registeredUser(app);
    const { data } = await owner.api.GET('/v1/billing/config');
    expect(data).toEqual({
      publishable_key: app.stripe?.emulator.publishableKey,
      features: { postpaid: true, payment_methods: true, invoices: true, customer_portal: true, enforcement: true },
    });
  });
});

describe('payment setup', () => {
  it('goes from checkout (postpaid_activation) to a default card and an active subscription on both meters', async () => {
    const owner = await registeredUser(app);
    const before = await account(owner.api);
    expect(before).toMatchObject({ processor_customer_id: null, processor_subscription_id: null, subscription_status: null, collection_method: 'charge_automatically' });
    expect((await owner.api.GET('/v1/billing/subscription')).response.status).toBe(404);
    expect(await cards(owner.api)).toEqual([]);

    await saveCard(owner, 'postpaid_activation');
    await waitUntil(async () => (await owner.api.GET('/v1/billing/subscription')).data?.subscription_status === 'active', 'subscription active');

    const after = await account(owner.api);
    expect(after).toMatchObject({ subscription_status: 'active', collection_method: 'charge_automatically', auto_charge_enabled_by_user_id: owner.user.id });
    expect(after?.processor_customer_id).toMatch(/^cus_/);
    const [card, ...others] = await cards(owner.api);
    expect(others).toEqual([]);
    expect(card).toMatchObject({ brand: 'visa', last4: '4242', exp_month: 12, exp_year: 2034, is_default: true });

    // At the processor: one subscription, a metered price for each meter, charged from that card.
    const subscriptions = await stripe.subscriptions.list({ customer: after?.processor_customer_id ?? '' });
    expect(subscriptions.data.map((subscription) => subscription.id)).toEqual([after?.processor_subscription_id]);
    const meters = await stripe.billing.meters.list();
    const meterOf = new Map(meters.data.map((meter) => [meter.id, meter.event_name]));
    expect(subscriptions.data[0]?.items.data.map((item) => meterOf.get(item.price.recurring?.meter ?? '')).sort()).toEqual(['gpu_instance_seconds', 'hosted_tokens']);
    const customer = (await stripe.customers.retrieve(after?.processor_customer_id ?? '')) as Stripe.Customer;
    expect(customer.invoice_settings.default_payment_method).toBe(card?.id);
  });

  it('saves cards (payment_method_setup), sets the default, activates postpaid with a card, detaches a card', async () => {
    const owner = await registeredUser(app);
    await saveCard(owner, 'payment_method_setup');
    await waitUntil(async () => (await cards(owner.api)).some((card) => card.is_default), 'first card default');
    await saveCard(owner, 'payment_method_setup', CARDS.mastercard);
    await webhooksSettled();
    const [visa, mastercard] = await cards(owner.api);
    expect([visa?.last4, visa?.is_default, mastercard?.last4, mastercard?.is_default]).toEqual(['4242', true, '4444', false]);
    expect((await account(owner.api))?.processor_subscription_id).toBeNull();

    const switched = await owner.api.PATCH('/v1/billing/payment-methods/default', { body: { processor_default_payment_method_id: mastercard?.id ?? '' } });
    expect(switched.data?.map((card) => [card.last4, card.is_default])).toEqual([['4444', true], ['4242', false]]);

    // A card saved for another customer is not ours: refused, as Stripe refuses it as default.
    const other = await stripe.customers.create({ name: 'someone else' });
    const foreign = await stripe.paymentMethods.attach('pm_card_visa', { customer: other.id });
    const refused = await owner.api.PATCH('/v1/billing/payment-methods/default', { body: { processor_default_payment_method_id: foreign.id } });
    expect(refused.response.status).toBe(404);
    expect(refused.error).toMatchObject({ code: 'NOT_FOUND' });
    const notOurs = await owner.api.POST('/v1/billing/subscription/activate-postpaid', { body: { processor_payment_method_id: foreign.id } });
    expect(notOurs.response.status).toBe(422);
    expect(notOurs.error?.errors).toEqual([{ location: 'body/processor_payment_method_id', message: expect.any(String) }]);

    const activated = await owner.api.POST('/v1/billing/subscription/activate-postpaid', { body: { processor_payment_method_id: visa?.id ?? '' } });
    expect(activated.data).toMatchObject({ subscription_status: 'active', collection_method: 'charge_automatically' });
    const again = await owner.api.POST('/v1/billing/subscription/activate-postpaid', { body: { processor_payment_method_id: visa?.id ?? '' } });
    expect(again.data).toEqual(activated.data);
    const customerId = (await account(owner.api))?.processor_customer_id ?? '';
    expect((await stripe.subscriptions.list({ customer: customerId })).data).toHaveLength(1);
    expect((await cards(owner.api)).map((card) => [card.last4, card.is_default])).toEqual([['4242', true], ['4444', false]]);

    const detached = await owner.api.DELETE('/v1/billing/payment-methods/{payment_method_id}', { params: { path: { payment_method_id: mastercard?.id ?? '' } } });
    expect(detached.response.status).toBe(204);
    expect((await cards(owner.api)).map((card) => card.last4)).toEqual(['4242']);
    expect((await stripe.paymentMethods.retrieve(mastercard?.id ?? '')).customer).toBeNull();
    const unknown = await owner.api.DELETE('/v1/billing/payment-methods/{payment_method_id}', { params: { path: { payment_method_id: mastercard?.id ?? '' } } });
    expect(unknown.response.status).toBe(404);
  });

  it('opens a customer portal session on an allowed return URL only', async () => {
    const owner = await registeredUser(app);
    const { data } = await owner.api.POST('/v1/billing/portal/session', { body: { return_url: `${APP_ORIGIN}/billing` } });
    expect(data?.url).toMatch(/^http/);
    expect((await fetch(data?.url ?? '')).status).toBe(200);
    const elsewhere = await owner.api.POST('/v1/billing/portal/session', { body: { return_url: 'https://evil.example/billing' } });
    expect(elsewhere.response.status).toBe(422);
  });

  it.each(['http://localhost:31080.evil.example/', 'http://a:b/'])('refuses a return_url that is no URL, %s, with 422 VALIDATION_FAILED, not 500', async (returnUrl) => {
    const owner = await registeredUser(app);
    const { response, error } = await owner.api.POST('/v1/billing/portal/session', { body: { return_url: returnUrl } });
    expect(response.status).toBe(422);
    expect(error).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ location: 'body/return_url', message: 'must be an absolute URL' }] });
  });
});

describe('collection method', () => {
  it('switches to send_invoice and back, recording who turned automatic charging on; 409 without a default card', async () => {
    const owner = await activatedOwner();
    const never = await registeredUser(app);
    expect((await never.api.PATCH('/v1/billing/subscription/collection-method', { body: { collection_method: 'send_invoice' } })).response.status).toBe(404);

    const invoiced = await owner.api.PATCH('/v1/billing/subscription/collection-method', { body: { collection_method: 'send_invoice' } });
    expect(invoiced.data?.collection_method).toBe('send_invoice');
    const subscriptionId = (await account(owner.api))?.processor_subscription_id ?? '';
    expect((await stripe.subscriptions.retrieve(subscriptionId)).collection_method).toBe('send_invoice');

    // With no default card, automatic charging is refused and nothing changes.
    const [card] = await cards(owner.api);
    await owner.api.DELETE('/v1/billing/payment-methods/{payment_method_id}', { params: { path: { payment_method_id: card?.id ?? '' } } });
    const refused = await owner.api.PATCH('/v1/billing/subscription/collection-method', { body: { collection_method: 'charge_automatically' } });
    expect(refused.response.status).toBe(409);
    expect(refused.error).toMatchObject({ code: 'PAYMENT_SETUP_INCOMPLETE' });
    expect((await stripe.subscriptions.retrieve(subscriptionId)).collection_method).toBe('send_invoice');

    await saveCard(owner, 'payment_method_setup');
    await waitUntil(async () => (await cards(owner.api)).some((saved) => saved.is_default), 'new card default');
    const charged = await owner.api.PATCH('/v1/billing/subscription/collection-method', { body: { collection_method: 'charge_automatically' } });
    expect(charged.data?.collection_method).toBe('charge_automatically');
    expect(await account(owner.api)).toMatchObject({ collection_method: 'charge_automatically', auto_charge_enabled_by_user_id: owner.user.id });
  });
});

describe('invoices and webhooks', () => {
  let owner: SignedInUser;
  beforeAll(async () => {
    owner = await activatedOwner();
  });

  it('lists the invoices the invoice.* webhooks brought, as the processor has them', async () => {
    // Creating the subscription invoiced its first (empty) period start, as Stripe does.
    await webhooksSettled();
    const first = await invoices(owner.api);
    const advanced = await fetch(`${emulatorUrl}/_emulator/advance_time`, {
      method: 'POST',
      headers: { authorization: `Bearer ${app.stripe?.emulator.secretKey}`, 'content-type': 'application/x-www-form-urlencoded' },
      body: 'seconds=2682000',
    });
    expect(advanced.status).toBe(200);
    await waitUntil(async () => (await invoices(owner.api)).length > first.length, 'the period’s invoice');
    await webhooksSettled();
    const customerId = (await account(owner.api))?.processor_customer_id ?? '';
    const atStripe = await stripe.invoices.list({ customer: customerId });
    expect(atStripe.data.length).toBeGreaterThan(0);
    expect((await invoices(owner.api)).map((invoice) => [invoice.processor_invoice_id, invoice.status, invoice.amount_paid])).toEqual(
      atStripe.data.map((invoice) => [invoice.id, invoice.status, invoice.amount_paid]),
    );
    const [latest] = await invoices(owner.api);
    expect(latest).toMatchObject({ status: 'paid', period_end: expect.any(String) });
    expect(latest).toMatchObject({ collection_method: 'charge_automatically', currency: 'usd', hosted_invoice_url: expect.stringMatching(/^http/), invoice_pdf: expect.stringMatching(/^http/) });
  });

  it('keeps each invoice’s number, lines, subtotal, tax and total, and backfills lost ones from the processor’s list (billing invoices)', async () => {
    await webhooksSettled();
    const customerId = (await account(owner.api))?.processor_customer_id ?? '';
    const atStripe = (await stripe.invoices.list({ customer: customerId })).data;
    const listed = await invoices(owner.api);
    expect(listed.map((invoice) => [invoice.processor_invoice_id, invoice.number, invoice.subtotal, invoice.tax, invoice.total, invoice.lines.map((line) => line.amount)])).toEqual(
      atStripe.map((invoice) => [invoice.id, invoice.number, invoice.subtotal, invoice.total - (invoice.total_excluding_tax ?? invoice.total), invoice.total, invoice.lines.data.map((line) => line.amount)]),
    );
    expect(listed[0]?.lines).toEqual([
      expect.objectContaining({ processor_price_id: expect.stringMatching(/^price_/), quantity: expect.any(Number), period_start: listed[0]?.period_start, period_end: listed[0]?.period_end }),
      expect.objectContaining({ processor_price_id: expect.stringMatching(/^price_/) }),
    ]);
    // The webhooks lost: the operator's view brings the invoices back from the processor's list.
    const { id: accountId, organization_id: organizationId } = await app.db('billing_accounts').where({ processor_customer_id: customerId }).first();
    await app.db('invoices').where({ billing_account_id: accountId }).delete();
    const stripeEnv = Object.fromEntries(Object.entries(app.env).filter(([name]) => name.startsWith('STRIPE_')));
    const view = await operatorCliIn({ NODE_ENV: 'test', APP_SECRET: app.env.APP_SECRET ?? '', DATABASE_URL: app.databaseUrl, ...stripeEnv }, 'billing', 'invoices', '--organization', String(organizationId));
    expect(view).toMatchObject({ code: 0, stderr: '' });
    expect(view.stdout).toContain(`${atStripe.length} invoices (${atStripe.length} synced from the processor)`);
    expect(view.stdout).toMatch(/current period .*: estimated \d+\.\d{2} usd/);
    expect(await invoices(owner.api)).toEqual(listed);
  });

  const post = (payload: string, signature: string) =>
    fetch(`${app.url}/v1/billing/webhook`, { method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': signature }, body: payload });
  const signed = (payload: string, timestamp?: number) => stripe.webhooks.generateTestHeaderString({ payload, secret: app.env.STRIPE_WEBHOOK_SECRET ?? '', timestamp });
  /** Posts each event, signed, to the webhook (200 each), and waits until the job processed them all. */
  const deliver = async (events: Array<{ id: string }>, what: string) => {
    for (const event of events) {
      const payload = JSON.stringify(event);
      expect((await post(payload, signed(payload))).status).toBe(200);
    }
    const ids = events.map((event) => event.id);
    await waitUntil(async () => (await app.db('billing_webhook_events').whereIn('id', ids).whereNotNull('processed_at')).length === ids.length, what);
  };
  const eventCount = async () => Number((await app.db('billing_webhook_events').count<{ count: string }[]>('id as count'))[0]?.count);

  it('acknowledges a replayed event and changes nothing twice', async () => {
    const customerId = (await account(owner.api))?.processor_customer_id ?? '';
    const [paidEvent] = (await stripe.events.list({ type: 'invoice.paid', limit: 100 })).data.filter((event) => (event.data.object as Stripe.Invoice).customer === customerId);
    if (!paidEvent) throw new Error('no invoice.paid event');
    const before = { events: await eventCount(), invoices: await invoices(owner.api), account: await account(owner.api) };
    const payload = JSON.stringify(paidEvent);
    const replay = await post(payload, signed(payload));
    expect(replay.status).toBe(200);
    expect(await replay.json()).toEqual({ received: true });
    expect(await eventCount()).toBe(before.events);
    expect(await invoices(owner.api)).toEqual(before.invoices);
    expect(await account(owner.api)).toEqual(before.account);
  });

  it('keeps the current state when the older event of an out-of-order pair comes last', async () => {
    const customerId = (await account(owner.api))?.processor_customer_id ?? '';
    const [created] = (await stripe.events.list({ type: 'invoice.created', limit: 100 })).data.filter((event) => (event.data.object as Stripe.Invoice).customer === customerId);
    const [subscriptionCreated] = (await stripe.events.list({ type: 'customer.subscription.created', limit: 100 })).data.filter(
      (event) => (event.data.object as Stripe.Subscription).customer === customerId,
    );
    if (!created || !subscriptionCreated) throw new Error('no events to deliver late');
    const before = { invoices: await invoices(owner.api), account: await account(owner.api) };
    // The same objects' first events, delivered (as Stripe may) after the later ones, under new ids.
    const late = [
      { ...created, id: `${created.id}_late` },
      { ...subscriptionCreated, id: `${subscriptionCreated.id}_late` },
    ];
    await deliver(late, 'late events processed');
    expect((created.data.object as Stripe.Invoice).status).toBe('draft');
    expect(await invoices(owner.api)).toEqual(before.invoices);
    const { updated_at: _a, ...accountBefore } = before.account ?? {};
    const { updated_at: _b, ...accountAfter } = (await account(owner.api)) ?? {};
    expect(accountAfter).toEqual(accountBefore);
  });

  it('writes an invoice or a subscription only to its own customer’s account: a signed event naming another customer moves nothing', async () => {
    const customerId = (await account(owner.api))?.processor_customer_id ?? '';
    const other = await activatedOwner();
    await webhooksSettled();
    const otherCustomer = (await account(other.api))?.processor_customer_id ?? '';
    const mine = (type: string) => stripe.events.list({ type, limit: 100 }).then((list) => list.data.find((event) => (event.data.object as { customer?: string }).customer === customerId));
    const [paid, subscribed] = await Promise.all([mine('invoice.paid'), mine('customer.subscription.created')]);
    if (!paid || !subscribed) throw new Error('no events to forge');
    const before = { mine: await invoices(owner.api), theirs: await invoices(other.api), theirAccount: await account(other.api) };
    // Plain records: spreading the SDK's union of every event object type costs the type checker minutes.
    const forged = [paid, subscribed].map((event) => {
      const object = event.data.object as unknown as Record<string, unknown>;
      return { ...(event as unknown as Record<string, unknown>), id: `${event.id}_other`, data: { object: { ...object, customer: otherCustomer } } };
    });
    await deliver(forged, 'the forged events processed');
    expect(await invoices(owner.api)).toEqual(before.mine);
    expect(await invoices(other.api)).toEqual(before.theirs);
    expect((await account(other.api))?.processor_subscription_id).toBe(before.theirAccount?.processor_subscription_id);
  });

  it('refuses a bad, stale or future-dated signature with 400 INVALID_SIGNATURE and stores nothing', async () => {
    const event = { id: `evt_forged_${Date.now()}`, object: 'event', type: 'invoice.paid', created: Math.floor(Date.now() / 1000), data: { object: { id: 'in_x', object: 'invoice' } }, livemode: false };
    const payload = JSON.stringify(event);
    const count = await eventCount();
    const wrongSecret = stripe.webhooks.generateTestHeaderString({ payload, secret: 'whsec_not_the_secret' });
    const stale = signed(payload, Math.floor(Date.now() / 1000) - 600);
    // Dated ahead of the clock, by a day and by just over the tolerance.
    const future = signed(payload, Math.floor(Date.now() / 1000) + 86_400);
    const soon = signed(payload, Math.floor(Date.now() / 1000) + 310);
    const tampered = signed(payload.replace('in_x', 'in_y'));
    for (const signature of [wrongSecret, stale, future, soon, tampered]) {
      const response = await post(payload, signature);
      expect(response.status).toBe(400);
      expect(await response.json()).toMatchObject({ code: 'INVALID_SIGNATURE' });
    }
    expect(await eventCount()).toBe(count);
  });
});

describe('meter errors', () => {
  it('records a meter event Stripe accepted and later refused (an unknown customer): the report keeps the error and the organization an open anomaly', async () => {
    const owner = await activatedOwner();
    await webhooksSettled();
    const organizationId = (await owner.api.GET('/v1/organization')).data?.id ?? 0;
    // A customer mapping Stripe does not know (a customer deleted in the Dashboard, a database restored into another account).
    await app.db('billing_accounts').where({ organization_id: organizationId }).update({ processor_customer_id: 'cus_NotAtThisStripeAccount' });
    await app.db('prices').insert({ provider: 'platform', region: '', resource_kind: 'hosted_model', instance_type: 'meter-error-model', gpu_type: '', gpu_count: '', unit_amount_decimal: '0.001' }).onConflict().ignore();
    await app.db('usage_records').insert({ request_id: 'meter-error', organization_id: organizationId, route: 'POST /v1/chat/completions', model: 'meter-error-model', unit: 'token', quantity: 5, created_at: new Date() });
    await app.container.usageReporter?.run(createLogger('silent'));
    const report = await app.db('usage_reports').where({ organization_id: organizationId }).first();
    // Accepted at once (200), as Stripe accepts it: marked sent.
    expect(report).toMatchObject({ value: '5000', reported_at: expect.any(Date) });

    await waitUntil(async () => (await owner.api.GET('/v1/billing/usage-summary')).data?.open_anomalies === 1, 'the meter error recorded');
    expect((await app.db('usage_reports').where({ id: report.id }).first()).processor_error).toMatch(/^meter_event_customer_not_found: /);
    const [anomaly] = await app.db('usage_anomalies').where({ organization_id: organizationId });
    expect(anomaly).toMatchObject({ kind: 'meter_error', meter: 'hosted_tokens', resolved_at: null, detail: expect.stringContaining(report.identifier) });
  });

  it('refuses a thin event whose signature does not verify, and acknowledges a repeated one once', async () => {
    const notification = { id: `evt_test_${Date.now()}`, object: 'v2.core.event', type: 'v1.billing.meter.error_report_triggered', created: new Date().toISOString(), livemode: false, related_object: { id: 'mtr_x', type: 'billing.meter', url: '/v1/billing/meters/mtr_x' } };
    const payload = JSON.stringify(notification);
    const post = (signature: string) =>
      fetch(`${app.url}/v1/billing/event-notifications`, { method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': signature }, body: payload });
    const forged = await post(stripe.webhooks.generateTestHeaderString({ payload, secret: 'whsec_not_the_secret' }));
    expect(forged.status).toBe(400);
    expect(await forged.json()).toMatchObject({ code: 'INVALID_SIGNATURE' });
    // The webhook's secret is not the event destination's.
    expect((await post(stripe.webhooks.generateTestHeaderString({ payload, secret: app.env.STRIPE_WEBHOOK_SECRET ?? '' }))).status).toBe(400);
    expect(await app.db('billing_webhook_events').where({ id: notification.id }).first()).toBeUndefined();
    const signed = () => stripe.webhooks.generateTestHeaderString({ payload, secret: app.env.STRIPE_EVENT_DESTINATION_SECRET ?? '' });
    for (let i = 0; i < 2; i++) {
      const response = await post(signed());
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ received: true });
    }
    expect(await app.db('billing_webhook_events').where({ id: notification.id })).toHaveLength(1);
  });
});

describe('billing reconcile (the operator CLI)', () => {
  it('compares with the processor and lists the open differences; needs a processor, and a note to resolve one', async () => {
    const stripeEnv = Object.fromEntries(Object.entries(app.env).filter(([name]) => name.startsWith('STRIPE_')));
    const settings = { NODE_ENV: 'test', APP_SECRET: app.env.APP_SECRET ?? '', DATABASE_URL: app.databaseUrl };
    const listed = await operatorCliIn({ ...settings, ...stripeEnv }, 'billing', 'reconcile');
    expect(listed).toMatchObject({ code: 0, stderr: '' });
    expect(listed.stdout).toMatch(/^compared \d+ customer meters over the last 35 days: \d+ open differences/);
    const noProcessor = await operatorCliIn(settings, 'billing', 'reconcile');
    expect(noProcessor).toMatchObject({ code: 1, stderr: expect.stringMatching(/^no payment processor is configured/) });
    expect(await operatorCliIn({ ...settings, ...stripeEnv }, 'billing', 'reconcile', '--resolve', '1')).toMatchObject({ code: 2, stderr: expect.stringMatching(/needs --note/) });
  });
});

describe('roles', () => {
  it('lets every role read config, account and usage; only admins change billing or see cards and invoices', async () => {
    const owner = await registeredUser(app);
    const organizationId = (await owner.api.GET('/v1/organization')).data?.id ?? 0;
    const viewer = await addedMember(app, organizationId, 'viewer');
    const member = await addedMember(app, organizationId, 'member');
    for (const reader of [viewer, member]) {
      expect((await reader.api.GET('/v1/billing/config')).response.status).toBe(200);
      expect((await reader.api.GET('/v1/billing/account')).data?.organization_id).toBe(organizationId);
      const usage = await reader.api.GET('/v1/billing/usage-summary');
      expect(usage.data).toMatchObject({ organization_id: organizationId, currency: 'usd', usage_totals: [], open_anomalies: 0 });
      expect((await reader.api.GET('/v1/billing/payment-methods')).response.status).toBe(403);
      expect((await reader.api.GET('/v1/billing/invoices')).response.status).toBe(403);
      expect((await reader.api.POST('/v1/billing/checkout/setup-session', { body: { purpose: 'payment_method_setup' } })).response.status).toBe(403);
      expect((await reader.api.PATCH('/v1/billing/subscription/collection-method', { body: { collection_method: 'send_invoice' } })).response.status).toBe(403);
    }
    expect((await account(owner.api))?.processor_customer_id).toBeNull();
  });
});

describe('processor ids', () => {
  it('shows the processor’s customer and subscription ids to admins only: viewers and members read null', async () => {
    const owner = await activatedOwner();
    const organizationId = (await owner.api.GET('/v1/organization')).data?.id ?? 0;
    const mine = await account(owner.api);
    expect(mine?.processor_customer_id).toMatch(/^cus_/);
    expect(mine?.processor_subscription_id).toMatch(/^sub_/);
    for (const role of ['viewer', 'member'] as const) {
      const reader = await addedMember(app, organizationId, role);
      expect(await account(reader.api)).toMatchObject({ organization_id: organizationId, processor_customer_id: null, processor_subscription_id: null, subscription_status: mine?.subscription_status });
    }
  });
});

// Last: it stops the emulator.
describe('processor down', () => {
  it('answers 502 PAYMENT_PROCESSOR_ERROR and writes nothing', async () => {
    const owner = await registeredUser(app);
    await app.stripe?.emulator.stop();
    const refused = await owner.api.POST('/v1/billing/checkout/setup-session', { body: { purpose: 'payment_method_setup' } });
    expect(refused.response.status).toBe(502);
    expect(refused.error).toMatchObject({ code: 'PAYMENT_PROCESSOR_ERROR' });
    expect((await owner.api.POST('/v1/billing/portal/session', {})).response.status).toBe(502);
    expect((await account(owner.api))?.processor_customer_id).toBeNull();
  });
});
