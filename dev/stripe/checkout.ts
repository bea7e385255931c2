import type Stripe from 'stripe';
import { emit, int, listRoute, mergeMetadata, record, requiredStr, retrieveRoute, str, type Context, type Route } from './api.ts';
import { DECLINE, testCard } from './cards.ts';
import { attachPaymentMethod, createCardPaymentMethod, createSetupIntent, rememberCard } from './customers.ts';
import { checkoutPageUrl } from './complete-checkout.ts';
import { invalidRequest } from './errors.ts';
import type { FormParams } from './form.ts';
import { build, newId } from './store.ts';

/**
 * Checkout Sessions in `setup` mode (https://docs.stripe.com/api/checkout/sessions,
 * https://docs.stripe.com/payments/save-and-reuse?platform=checkout) and customer portal sessions
 * (https://docs.stripe.com/api/customer_portal/sessions) with their configurations. A setup session has a SetupIntent from
 * the start; completing it on its page saves the card as a PaymentMethod attached to the customer
 * (not made the default: that is the integration's job), then `setup_intent.succeeded`,
 * `payment_method.attached` and `checkout.session.completed` follow.
 */

const SESSION_LIFETIME = 24 * 3600;

export const checkoutRoutes: Route[] = [
  {
    method: 'POST',
    path: '/v1/checkout/sessions',
    params: ['mode', 'customer', 'success_url', 'cancel_url', 'return_url', 'ui_mode', 'currency', 'payment_method_types', 'client_reference_id', 'metadata', 'setup_intent_data[metadata]', 'setup_intent_data[description]', 'expires_at', 'customer_email'],
    required: ['mode'],
    handle: (ctx, params) => createSetupSession(ctx, params),
  },
  { method: 'GET', path: '/v1/checkout/sessions/:id', params: [], handle: (ctx, _params, path) => sessionNow(ctx, path.id) },
  listRoute<Stripe.Checkout.Session>('/v1/checkout/sessions', 'checkout.session', {
    customer: (s, v) => s.customer === v,
    status: (s, v) => s.status === v,
    setup_intent: (s, v) => s.setup_intent === v,
  }),
  {
    method: 'POST',
    path: '/v1/checkout/sessions/:id/expire',
    params: [],
    handle(ctx, _params, path) {
      const session = sessionNow(ctx, path.id);
      if (session.status !== 'open') throw invalidRequest(`Only Checkout Sessions with a status in ["open"] can be expired. This Checkout Session has a status of "${session.status}".`);
      session.status = 'expired';
      emit(ctx, 'checkout.session.expired', session);
      return session;
    },
  },
  {
    method: 'POST',
    path: '/v1/billing_portal/configurations',
    params: ['features', 'business_profile', 'default_return_url', 'login_page', 'metadata', 'name'],
    required: ['features'],
    handle(ctx, params) {
      const features = record(params, 'features') ?? {};
      const enabled = (name: string) => {
        const feature = features[name];
        return typeof feature === 'object' && !Array.isArray(feature) && feature.enabled === 'true';
      };
      const example = build<Stripe.BillingPortal.Configuration>('billing_portal.configuration', { id: newId('bpc') });
      const now = ctx.store.now();
      return ctx.store.put<Stripe.BillingPortal.Configuration>({
        ...example,
        // Created through the API: not the default, which only the Dashboard's saved settings make.
        is_default: false,
        active: true,
        created: now,
        updated: now,
        name: str(params, 'name') ?? null,
        default_return_url: str(params, 'default_return_url') ?? null,
        metadata: mergeMetadata({}, record(params, 'metadata')),
        features: {
          ...example.features,
          invoice_history: { enabled: enabled('invoice_history') },
          payment_method_update: { ...example.features.payment_method_update, enabled: enabled('payment_method_update') },
          customer_update: { ...example.features.customer_update, enabled: enabled('customer_update') },
        },
      });
    },
  },
  retrieveRoute('/v1/billing_portal/configurations/:id', 'billing_portal.configuration'),
  listRoute<Stripe.BillingPortal.Configuration>('/v1/billing_portal/configurations', 'billing_portal.configuration', {
    active: (c, v) => String(c.active) === v,
    is_default: (c, v) => String(c.is_default) === v,
  }),
  {
    method: 'POST',
    path: '/v1/billing_portal/sessions',
    params: ['customer', 'return_url', 'configuration', 'locale'],
    required: ['customer'],
    handle(ctx, params) {
      const customer = requiredStr(params, 'customer');
      ctx.store.get(customer, 'customer', 'customer');
      const configuration = portalConfiguration(ctx, str(params, 'configuration'));
      const id = newId('bps');
      return ctx.store.put(
        build<Stripe.BillingPortal.Session>('billing_portal.session', {
          id,
          configuration: configuration.id,
          created: ctx.store.now(customer),
          customer,
          flow: null,
          livemode: false,
          locale: null,
          on_behalf_of: null,
          return_url: str(params, 'return_url') ?? null,
          url: `${ctx.baseUrl}/portal/${id}`,
        }),
      );
    },
  },
];

/**
 * The configuration a portal session uses: the one named, or the account's default, which exists
 * only once the portal's settings were saved in the Dashboard; until then Stripe refuses the session
 * (its test-mode message, quoted in mozilla/fxa#13245), so an integration must create one with the
 * API and name it (https://docs.stripe.com/api/customer_portal/configurations/create).
 */
function portalConfiguration(ctx: Context, id: string | undefined): Stripe.BillingPortal.Configuration {
  if (id) {
    const named = ctx.store.get<Stripe.BillingPortal.Configuration>(id, 'billing_portal.configuration', 'configuration');
    if (!named.active) throw invalidRequest(`The configuration ${id} is not active.`, { param: 'configuration' });
    return named;
  }
  const [fallback] = ctx.store.all<Stripe.BillingPortal.Configuration>('billing_portal.configuration', (c) => c.is_default && c.active);
  if (!fallback) {
    throw invalidRequest(
      "You can't create a portal session in test mode until you save your customer portal settings in test mode at https://dashboard.stripe.com/test/settings/billing/portal.",
    );
  }
  return fallback;
}

function createSetupSession(ctx: Context, params: FormParams): Stripe.Checkout.Session {
  const mode = requiredStr(params, 'mode');
  if (mode !== 'setup') throw invalidRequest(`The Stripe emulator supports Checkout in setup mode only, not ${mode}.`, { param: 'mode' });
  const uiMode = str(params, 'ui_mode') ?? 'hosted_page';
  if (uiMode !== 'hosted_page' && uiMode !== 'embedded_page') throw invalidRequest(`Invalid ui_mode: must be one of hosted_page or embedded_page`, { param: 'ui_mode' });
  const embedded = uiMode === 'embedded_page';
  const successUrl = str(params, 'success_url');
  const returnUrl = str(params, 'return_url');
  // https://docs.stripe.com/api/checkout/sessions/create#create_checkout_session-success_url and -return_url
  if (embedded && successUrl) throw invalidRequest('success_url is not allowed when ui_mode is embedded_page; use return_url.', { param: 'success_url' });
  if (embedded && !returnUrl) throw invalidRequest('return_url is required when ui_mode is embedded_page.', { param: 'return_url' });
  if (!embedded && returnUrl) throw invalidRequest('return_url is only allowed when ui_mode is embedded_page.', { param: 'return_url' });
  const customer = str(params, 'customer') ?? null;
  if (customer) ctx.store.get(customer, 'customer', 'customer');
  const currency = str(params, 'currency');
  const methods = params.payment_method_types;
  // Setup mode needs a currency unless payment_method_types is given (dynamic payment methods).
  if (!currency && methods === undefined) throw invalidRequest('Missing required param: currency.', { code: 'parameter_missing', param: 'currency' });
  const now = ctx.store.now(customer);
  const expiresAt = int(params, 'expires_at') ?? now + SESSION_LIFETIME;
  if (expiresAt < now + 1800 || expiresAt > now + SESSION_LIFETIME) throw invalidRequest('expires_at must be between 30 minutes and 24 hours from now.', { param: 'expires_at' });
  const setupData = record(params, 'setup_intent_data');
  const intent = createSetupIntent(ctx, { customer, usage: 'off_session', metadata: mergeMetadata({}, setupData?.metadata as FormParams | undefined), description: typeof setupData?.description === 'string' ? setupData.description : null });
  const id = `cs_test_${newId('x', 58).slice(2)}`;
  return ctx.store.put(
    build<Stripe.Checkout.Session>('checkout.session', {
      id,
      after_expiration: null,
      cancel_url: str(params, 'cancel_url') ?? null,
      client_reference_id: str(params, 'client_reference_id') ?? null,
      client_secret: embedded ? `${id}_secret_${newId('x').slice(2)}` : null,
      created: now,
      currency: currency?.toLowerCase() ?? null,
      custom_text: { after_submit: null, shipping_address: null, submit: null, terms_of_service_acceptance: null },
      customer,
      customer_details: null,
      customer_email: str(params, 'customer_email') ?? null,
      expires_at: expiresAt,
      invoice_creation: null,
      metadata: mergeMetadata({}, record(params, 'metadata')),
      mode: 'setup',
      payment_intent: null,
      payment_method_configuration_details: null,
      payment_method_types: ['card'],
      payment_status: 'no_payment_required',
      return_url: returnUrl,
      setup_intent: intent.id,
      shipping_address_collection: null,
      shipping_cost: null,
      status: 'open',
      success_url: successUrl ?? null,
      total_details: null,
      ui_mode: uiMode as Stripe.Checkout.Session.UiMode,
      url: embedded ? null : checkoutPageUrl(ctx.baseUrl, id),
    }),
  );
}

/** The session, expired first if its time has passed (Stripe expires sessions on its own). */
function sessionNow(ctx: Context, id: string): Stripe.Checkout.Session {
  const session = ctx.store.get<Stripe.Checkout.Session>(id, 'checkout.session');
  if (session.status === 'open' && ctx.store.now(session.customer as string | null) >= session.expires_at) {
    session.status = 'expired';
    emit(ctx, 'checkout.session.expired', session);
  }
  return session;
}

export type CompletionResult = { outcome: 'completed'; redirect: string | null; paymentMethod: string } | { outcome: 'declined' | 'refused'; message: string };

/**
 * What the checkout page does when a card is submitted: a card Stripe declines leaves the session
 * open with the SetupIntent's `last_setup_error`; a good one completes it.
 */
export function completeSetupSession(ctx: Context, id: string, form: { number: string; expiry: string; name?: string }): CompletionResult {
  const session = ctx.store.find<Stripe.Checkout.Session>(id, 'checkout.session') ? sessionNow(ctx, id) : undefined;
  if (!session) return { outcome: 'refused', message: 'This checkout session does not exist.' };
  if (session.status !== 'open') return { outcome: 'refused', message: `This checkout session is ${session.status}.` };
  const card = testCard(form.number);
  if (!card) return { outcome: 'refused', message: 'Your card number is invalid. Use a Stripe test card, such as 4242 4242 4242 4242.' };
  const expiry = /^\s*(\d{1,2})\s*\/\s*(\d{2}|\d{4})\s*$/.exec(form.expiry);
  const month = Number(expiry?.[1]);
  const yearText = expiry?.[2] ?? '';
  const year = yearText.length === 2 ? 2000 + Number(yearText) : Number(yearText);
  const today = new Date();
  if (!expiry || month < 1 || month > 12 || year * 12 + month < today.getUTCFullYear() * 12 + today.getUTCMonth() + 1) {
    return { outcome: 'refused', message: "Your card's expiration date is incomplete or in the past (MM / YY)." };
  }
  const intent = ctx.store.get<Stripe.SetupIntent>(session.setup_intent as string, 'setup_intent');
  const paymentMethod = createCardPaymentMethod(ctx, card, { month, year }, { name: form.name ?? null, email: session.customer_email });
  rememberCard(paymentMethod, card);
  if (card.declinesSetup) {
    intent.last_setup_error = { type: 'card_error', code: DECLINE.code, decline_code: DECLINE.declineCode, message: DECLINE.message, payment_method: paymentMethod } as Stripe.SetupIntent.LastSetupError;
    intent.status = 'requires_payment_method';
    emit(ctx, 'setup_intent.setup_failed', intent);
    return { outcome: 'declined', message: DECLINE.message };
  }
  if (session.customer) attachPaymentMethod(ctx, paymentMethod, session.customer as string);
  intent.payment_method = paymentMethod.id;
  intent.status = 'succeeded';
  intent.last_setup_error = null;
  emit(ctx, 'setup_intent.succeeded', intent);
  session.status = 'complete';
  session.customer_details = { address: null, business_name: null, email: session.customer_email, individual_name: null, name: form.name ?? null, phone: null, tax_exempt: 'none', tax_ids: [] } as Stripe.Checkout.Session.CustomerDetails;
  emit(ctx, 'checkout.session.completed', session);
  const target = session.success_url ?? session.return_url;
  return { outcome: 'completed', redirect: target ? target.replaceAll('{CHECKOUT_SESSION_ID}', session.id) : null, paymentMethod: paymentMethod.id };
}
