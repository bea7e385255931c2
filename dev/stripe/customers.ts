import { createHash } from 'node:crypto';
import type Stripe from 'stripe';
import { emit, LIST_PARAMS, list, listRoute, mergeMetadata, record, requiredStr, retrieveRoute, str, type Context, type Route } from './api.ts';
import { DECLINE, testPaymentMethodCard, type TestCard } from './cards.ts';
import { invalidRequest, StripeApiError } from './errors.ts';
import { build, newId } from './store.ts';

/**
 * Customers (https://docs.stripe.com/api/customers), PaymentMethods
 * (https://docs.stripe.com/api/payment_methods) and SetupIntents (https://docs.stripe.com/api/setup_intents).
 */

export function createCustomer(ctx: Context, fields: { email?: string; name?: string; description?: string; metadata?: Record<string, string>; test_clock?: string | null }): Stripe.Customer {
  if (fields.test_clock) ctx.store.get(fields.test_clock, 'test_helpers.test_clock', 'test_clock');
  const id = newId('cus', 14);
  const customer = ctx.store.put(
    build<Stripe.Customer>('customer', {
      id,
      address: null,
      created: ctx.store.now(),
      currency: null,
      discount: null,
      email: fields.email ?? null,
      name: fields.name ?? null,
      description: fields.description ?? null,
      metadata: fields.metadata ?? {},
      invoice_prefix: id.slice(4, 12).toUpperCase(),
      invoice_settings: { custom_fields: null, default_payment_method: null, footer: null, rendering_options: null },
      shipping: null,
      test_clock: fields.test_clock ?? null,
    }),
  );
  emit(ctx, 'customer.created', customer);
  return customer;
}

/** Makes a saved card from a test card: the PaymentMethod Stripe creates when a card is collected. */
export function createCardPaymentMethod(ctx: Context, card: TestCard, expiry: { month: number; year: number }, billing: { name?: string | null; email?: string | null } = {}): Stripe.PaymentMethod {
  const fingerprint = createHash('sha256').update(card.number).digest('base64url').slice(0, 16);
  return ctx.store.put(
    build<Stripe.PaymentMethod>('payment_method', {
      id: newId('pm'),
      allow_redisplay: 'unspecified',
      billing_details: { address: null, email: billing.email ?? null, name: billing.name ?? null, phone: null, tax_id: null },
      card: {
        brand: card.brand,
        checks: { address_line1_check: null, address_postal_code_check: null, cvc_check: 'pass' },
        country: 'US',
        display_brand: card.brand,
        exp_month: expiry.month,
        exp_year: expiry.year,
        fingerprint,
        funding: card.funding,
        generated_from: null,
        last4: card.number.slice(-4),
        networks: { available: [card.brand], preferred: null },
        regulated_status: 'unregulated',
        three_d_secure_usage: { supported: true },
        wallet: null,
      } as Stripe.PaymentMethod.Card,
      created: ctx.store.now(),
      customer: null,
      metadata: {},
      type: 'card',
    }),
  );
}

/** The card a saved PaymentMethod came from (kept beside it, as Stripe keeps the card behind the token). */
const cardsOf = new WeakMap<object, TestCard>();
export function cardOf(paymentMethod: Stripe.PaymentMethod): TestCard | undefined {
  return cardsOf.get(paymentMethod);
}
export function rememberCard(paymentMethod: Stripe.PaymentMethod, card: TestCard): void {
  cardsOf.set(paymentMethod, card);
}

/** Attach (https://docs.stripe.com/api/payment_methods/attach): a declined card is refused with 402. */
export function attachPaymentMethod(ctx: Context, paymentMethod: Stripe.PaymentMethod, customerId: string): Stripe.PaymentMethod {
  ctx.store.get<Stripe.Customer>(customerId, 'customer', 'customer');
  if (paymentMethod.customer && paymentMethod.customer !== customerId) {
    throw invalidRequest('The payment method you provided has already been attached to a customer.', { code: 'payment_method_unexpected_state' });
  }
  if (cardOf(paymentMethod)?.declinesSetup) {
    throw new StripeApiError(402, 'card_error', DECLINE.message, { code: DECLINE.code, declineCode: DECLINE.declineCode });
  }
  if (paymentMethod.customer === customerId) return paymentMethod;
  paymentMethod.customer = customerId;
  emit(ctx, 'payment_method.attached', paymentMethod);
  return paymentMethod;
}

/** A PaymentMethod by id; a test id (`pm_card_visa`) becomes a new saved card, as in test mode. */
function paymentMethodFor(ctx: Context, id: string): Stripe.PaymentMethod {
  const card = testPaymentMethodCard(id);
  if (card) {
    const paymentMethod = createCardPaymentMethod(ctx, card, { month: 12, year: new Date().getUTCFullYear() + 3 });
    rememberCard(paymentMethod, card);
    return paymentMethod;
  }
  return ctx.store.get<Stripe.PaymentMethod>(id, 'payment_method', 'payment_method');
}

function setDefaultPaymentMethod(ctx: Context, customer: Stripe.Customer, id: string | null): void {
  if (id !== null) {
    const paymentMethod = ctx.store.find<Stripe.PaymentMethod>(id, 'payment_method');
    // https://docs.stripe.com/api/customers/update#update_customer-invoice_settings-default_payment_method
    if (!paymentMethod || paymentMethod.customer !== customer.id) {
      throw invalidRequest(`The customer does not have a payment method with the ID ${id}. The payment method must be attached to the customer.`, {
        code: 'resource_missing',
        param: 'invoice_settings[default_payment_method]',
      });
    }
  }
  customer.invoice_settings.default_payment_method = id;
}

export const customerRoutes: Route[] = [
  {
    method: 'POST',
    path: '/v1/customers',
    params: ['email', 'name', 'description', 'metadata', 'test_clock', 'payment_method', 'invoice_settings[default_payment_method]'],
    handle(ctx, params) {
      const customer = createCustomer(ctx, {
        email: str(params, 'email'),
        name: str(params, 'name'),
        description: str(params, 'description'),
        metadata: mergeMetadata({}, record(params, 'metadata')),
        test_clock: str(params, 'test_clock'),
      });
      const paymentMethod = str(params, 'payment_method');
      if (paymentMethod) attachPaymentMethod(ctx, paymentMethodFor(ctx, paymentMethod), customer.id);
      const preferred = record(params, 'invoice_settings')?.default_payment_method;
      if (typeof preferred === 'string') setDefaultPaymentMethod(ctx, customer, preferred);
      return customer;
    },
  },
  listRoute<Stripe.Customer>('/v1/customers', 'customer', { email: (c, v) => c.email === v, test_clock: (c, v) => c.test_clock === v }),
  retrieveRoute('/v1/customers/:id', 'customer'),
  {
    method: 'POST',
    path: '/v1/customers/:id',
    params: ['email', 'name', 'description', 'metadata', 'invoice_settings[default_payment_method]'],
    handle(ctx, params, path) {
      const customer = ctx.store.get<Stripe.Customer>(path.id, 'customer');
      const before = structuredClone(customer);
      const email = str(params, 'email');
      const name = str(params, 'name');
      const description = str(params, 'description');
      if (email !== undefined) customer.email = email || null;
      if (name !== undefined) customer.name = name || null;
      if (description !== undefined) customer.description = description || null;
      if (params.metadata !== undefined) customer.metadata = mergeMetadata(customer.metadata, record(params, 'metadata'));
      const settings = record(params, 'invoice_settings');
      if (settings) {
        const preferred = settings.default_payment_method;
        if (preferred !== undefined) setDefaultPaymentMethod(ctx, customer, typeof preferred === 'string' && preferred !== '' ? preferred : null);
      }
      emitUpdated(ctx, 'customer.updated', before, customer);
      return customer;
    },
  },
  {
    method: 'GET',
    path: '/v1/customers/:id/payment_methods',
    params: [...LIST_PARAMS, 'type', 'allow_redisplay'],
    handle(ctx, params, path) {
      ctx.store.get<Stripe.Customer>(path.id, 'customer');
      return listPaymentMethods(ctx, path.id, params, `/v1/customers/${path.id}/payment_methods`);
    },
  },
  {
    method: 'GET',
    path: '/v1/payment_methods',
    params: [...LIST_PARAMS, 'customer', 'type'],
    handle(ctx, params) {
      const customer = str(params, 'customer');
      if (customer) ctx.store.get<Stripe.Customer>(customer, 'customer', 'customer');
      return listPaymentMethods(ctx, customer, params, '/v1/payment_methods');
    },
  },
  retrieveRoute('/v1/payment_methods/:id', 'payment_method'),
  {
    method: 'POST',
    path: '/v1/payment_methods/:id/attach',
    params: ['customer'],
    required: ['customer'],
    handle: (ctx, params, path) => attachPaymentMethod(ctx, paymentMethodFor(ctx, path.id), requiredStr(params, 'customer')),
  },
  {
    method: 'POST',
    path: '/v1/payment_methods/:id/detach',
    params: [],
    handle(ctx, _params, path) {
      const paymentMethod = ctx.store.get<Stripe.PaymentMethod>(path.id, 'payment_method');
      const customerId = typeof paymentMethod.customer === 'string' ? paymentMethod.customer : null;
      if (!customerId) {
        throw invalidRequest('The payment method you provided is not attached to a customer so detachment is impossible.', { code: 'payment_method_unexpected_state' });
      }
      paymentMethod.customer = null;
      emit(ctx, 'payment_method.detached', paymentMethod, { customer: customerId });
      // A detached card stops being the customer's default (and a subscription's).
      const customer = ctx.store.get<Stripe.Customer>(customerId, 'customer');
      if (customer.invoice_settings.default_payment_method === paymentMethod.id) {
        const before = structuredClone(customer);
        customer.invoice_settings.default_payment_method = null;
        emitUpdated(ctx, 'customer.updated', before, customer);
      }
      for (const subscription of ctx.store.all<Stripe.Subscription>('subscription', (s) => s.default_payment_method === paymentMethod.id)) {
        subscription.default_payment_method = null;
      }
      return paymentMethod;
    },
  },
  {
    method: 'POST',
    path: '/v1/setup_intents',
    params: ['customer', 'payment_method_types', 'usage', 'metadata', 'description'],
    handle(ctx, params) {
      const customer = str(params, 'customer');
      if (customer) ctx.store.get<Stripe.Customer>(customer, 'customer', 'customer');
      const usage = str(params, 'usage') ?? 'off_session';
      if (usage !== 'off_session' && usage !== 'on_session') throw invalidRequest(`Invalid usage: must be one of off_session or on_session`, { param: 'usage' });
      return createSetupIntent(ctx, { customer: customer ?? null, usage, metadata: mergeMetadata({}, record(params, 'metadata')), description: str(params, 'description') ?? null });
    },
  },
  retrieveRoute('/v1/setup_intents/:id', 'setup_intent'),
];

export function createSetupIntent(ctx: Context, fields: { customer: string | null; usage: 'off_session' | 'on_session'; metadata: Record<string, string>; description: string | null }): Stripe.SetupIntent {
  const id = newId('seti');
  const intent = ctx.store.put(
    build<Stripe.SetupIntent>('setup_intent', {
      id,
      client_secret: `${id}_secret_${newId('x').slice(2)}`,
      created: ctx.store.now(fields.customer),
      customer: fields.customer,
      description: fields.description,
      last_setup_error: null,
      metadata: fields.metadata,
      next_action: null,
      payment_method: null,
      payment_method_configuration_details: null,
      payment_method_types: ['card'],
      status: 'requires_payment_method',
      usage: fields.usage,
    }),
  );
  emit(ctx, 'setup_intent.created', intent);
  return intent;
}

function listPaymentMethods(ctx: Context, customer: string | undefined, params: Parameters<Route['handle']>[1], url: string) {
  const type = str(params, 'type');
  if (type !== undefined && type !== 'card') return list(url, [], params);
  return list(url, ctx.store.all<Stripe.PaymentMethod>('payment_method', (pm) => pm.customer !== null && (!customer || pm.customer === customer)), params);
}

/** `*.updated` events carry the changed fields' previous values in `data.previous_attributes`. */
export function emitUpdated<T extends { id: string; object: string }>(ctx: Context, type: string, before: T, after: T): void {
  const previous: Record<string, unknown> = {};
  for (const key of Object.keys(after) as (keyof T & string)[]) {
    if (JSON.stringify(before[key]) !== JSON.stringify(after[key])) previous[key] = before[key];
  }
  if (Object.keys(previous).length) emit(ctx, type, after, previous);
}
