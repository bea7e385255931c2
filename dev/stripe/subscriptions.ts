import type Stripe from 'stripe';
import { array, bool, emit, int, listRoute, mergeMetadata, record, requiredStr, retrieveRoute, str, type Context, type Route } from './api.ts';
import { DECLINE } from './cards.ts';
import { aggregate } from './catalog.ts';
import { cardOf, emitUpdated } from './customers.ts';
import { invalidRequest, missingParam, StripeApiError } from './errors.ts';
import type { FormParams } from './form.ts';
import { build, newId } from './store.ts';

/**
 * Subscriptions with metered prices (https://docs.stripe.com/api/subscriptions,
 * https://docs.stripe.com/billing/subscriptions/usage-based), their invoices
 * (https://docs.stripe.com/api/invoices; lifecycle draft → open → paid, with `invoice.created`,
 * `invoice.finalized`, `invoice.paid` / `invoice.payment_failed`,
 * https://docs.stripe.com/billing/subscriptions/webhooks) and test clocks to move a customer's
 * time forward (https://docs.stripe.com/api/test_clocks). Periods follow the items
 * (`items.data[].current_period_start/end`, API version 2025-03-31.basil and later).
 */

const DAY = 86_400;

export const subscriptionRoutes: Route[] = [
  {
    method: 'POST',
    path: '/v1/subscriptions',
    params: ['customer', 'items[][price]', 'items[][quantity]', 'items[][metadata]', 'collection_method', 'days_until_due', 'default_payment_method', 'metadata', 'payment_behavior', 'off_session', 'description'],
    required: ['customer', 'items'],
    handle: (ctx, params) => createSubscription(ctx, params),
  },
  retrieveRoute('/v1/subscriptions/:id', 'subscription'),
  listRoute<Stripe.Subscription>(
    '/v1/subscriptions',
    'subscription',
    {
      customer: (s, v) => s.customer === v,
      status: (s, v) => v === 'all' || s.status === v,
      price: (s, v) => s.items.data.some((item) => item.price.id === v),
    },
    // Canceled subscriptions are listed only when asked for (`status=canceled` or `all`).
    { status: (s) => s.status !== 'canceled' },
  ),
  {
    method: 'POST',
    path: '/v1/subscriptions/:id',
    params: ['collection_method', 'days_until_due', 'default_payment_method', 'metadata', 'description', 'cancel_at_period_end'],
    handle(ctx, params, path) {
      const subscription = ctx.store.get<Stripe.Subscription>(path.id, 'subscription');
      if (subscription.status === 'canceled') throw invalidRequest('A canceled subscription can only update its cancellation_details and metadata.');
      const before = structuredClone(subscription);
      applyCollection(subscription, params);
      const paymentMethod = str(params, 'default_payment_method');
      if (paymentMethod !== undefined) subscription.default_payment_method = paymentMethod ? attachedTo(ctx, paymentMethod, subscription.customer as string) : null;
      if (params.metadata !== undefined) subscription.metadata = mergeMetadata(subscription.metadata, record(params, 'metadata'));
      const description = str(params, 'description');
      if (description !== undefined) subscription.description = description || null;
      const cancelAtEnd = bool(params, 'cancel_at_period_end');
      if (cancelAtEnd !== undefined) subscription.cancel_at_period_end = cancelAtEnd;
      emitUpdated(ctx, 'customer.subscription.updated', before, subscription);
      return subscription;
    },
  },
  {
    method: 'DELETE',
    path: '/v1/subscriptions/:id',
    params: ['invoice_now', 'prorate'],
    handle(ctx, params, path) {
      const subscription = ctx.store.get<Stripe.Subscription>(path.id, 'subscription');
      if (subscription.status === 'canceled') throw invalidRequest(`No such subscription: '${subscription.id}'`, { code: 'resource_missing' });
      const now = ctx.store.now(subscription.customer as string);
      // `invoice_now`: the usage of the period so far is invoiced at once.
      if (bool(params, 'invoice_now')) bill(ctx, subscription, period(subscription).start, now, 'subscription_cycle');
      subscription.status = 'canceled';
      subscription.canceled_at = now;
      subscription.ended_at = now;
      emit(ctx, 'customer.subscription.deleted', subscription);
      return subscription;
    },
  },
  listRoute<Stripe.Invoice>('/v1/invoices', 'invoice', {
    customer: (i, v) => i.customer === v,
    subscription: (i, v) => i.parent?.subscription_details?.subscription === v,
    status: (i, v) => i.status === v,
    collection_method: (i, v) => i.collection_method === v,
  }),
  {
    // https://docs.stripe.com/api/invoices/create_preview: the invoice the subscription's current
    // period would make with the usage so far; not stored (its id is the `upcoming_` kind).
    method: 'POST',
    path: '/v1/invoices/create_preview',
    params: ['customer', 'subscription'],
    handle(ctx, params) {
      const subscriptionId = str(params, 'subscription');
      const customerId = str(params, 'customer');
      const subscription = subscriptionId
        ? ctx.store.get<Stripe.Subscription>(subscriptionId, 'subscription')
        : ctx.store.all<Stripe.Subscription>('subscription', (s) => s.customer === customerId && s.status !== 'canceled')[0];
      if (!subscription || subscription.status === 'canceled' || (customerId && subscription.customer !== customerId)) {
        throw invalidRequest('No upcoming invoices for customer', { code: 'invoice_upcoming_none' });
      }
      const { start, end } = period(subscription);
      return draftInvoice(ctx, subscription, `upcoming_${newId('in')}`, start, end, 'upcoming');
    },
  },
  retrieveRoute('/v1/invoices/:id', 'invoice'),
  {
    // https://docs.stripe.com/api/invoiceitems/create: a pending item for the customer's next invoice.
    method: 'POST',
    path: '/v1/invoiceitems',
    params: ['customer', 'amount', 'currency', 'description', 'subscription', 'metadata', 'period'],
    required: ['customer'],
    handle(ctx, params) {
      const customer = ctx.store.get<Stripe.Customer>(requiredStr(params, 'customer'), 'customer', 'customer');
      const amount = int(params, 'amount');
      if (amount === undefined) throw missingParam('amount');
      const subscription = str(params, 'subscription');
      if (subscription) ctx.store.get(subscription, 'subscription', 'subscription');
      const now = ctx.store.now(customer.id);
      const item = build<Stripe.InvoiceItem>('invoiceitem', {
        id: newId('ii'),
        amount,
        currency: (str(params, 'currency') ?? 'usd').toLowerCase(),
        customer: customer.id,
        date: now,
        description: str(params, 'description') ?? null,
        invoice: null,
        metadata: mergeMetadata({}, record(params, 'metadata')),
        parent: subscription ? ({ type: 'subscription_details', subscription_details: { subscription } } as Stripe.InvoiceItem.Parent) : null,
        period: { start: now, end: now },
        test_clock: customer.test_clock,
      });
      return ctx.store.put(item);
    },
  },
  listRoute<Stripe.CreditNote>('/v1/credit_notes', 'credit_note', { invoice: (n, v) => n.invoice === v, customer: (n, v) => n.customer === v }),
  retrieveRoute('/v1/credit_notes/:id', 'credit_note'),
  {
    // https://docs.stripe.com/api/credit_notes/create: only for a finalized invoice (open or paid),
    // at most what is left of it; on a paid one the credit goes to the customer's balance
    // (`credit_amount`), on an open one it lowers what is due.
    method: 'POST',
    path: '/v1/credit_notes',
    params: ['invoice', 'lines', 'memo', 'reason', 'metadata', 'credit_amount'],
    required: ['invoice'],
    handle(ctx, params) {
      const invoice = ctx.store.get<Stripe.Invoice>(requiredStr(params, 'invoice'), 'invoice', 'invoice');
      if (invoice.status !== 'open' && invoice.status !== 'paid') {
        throw invalidRequest(`You can only create a credit note for an open or paid invoice; this one is ${invoice.status}.`, { param: 'invoice' });
      }
      const lines = (array(params, 'lines') ?? []).map((line) => {
        const fields = line as FormParams;
        const quantity = Number(fields.quantity ?? 1);
        const unitAmount = Number(fields.unit_amount);
        if (fields.type !== 'custom_line_item' || !Number.isInteger(unitAmount) || unitAmount <= 0) throw invalidRequest('Invalid lines: a custom_line_item needs a positive unit_amount', { param: 'lines' });
        return { amount: quantity * unitAmount, description: typeof fields.description === 'string' ? fields.description : null, quantity, unit_amount: unitAmount };
      });
      if (!lines.length) throw missingParam('lines');
      const total = lines.reduce((sum, line) => sum + line.amount, 0);
      const paid = invoice.status === 'paid';
      const room = paid ? invoice.amount_paid - (invoice.post_payment_credit_notes_amount ?? 0) : invoice.amount_remaining;
      if (total > room) throw invalidRequest(`The credit note's total (${total}) is more than the invoice's amount left to credit (${room}).`, { param: 'lines' });
      if (paid && int(params, 'credit_amount') !== total) throw invalidRequest('A credit note for a paid invoice needs credit_amount, refund_amount or out_of_band_amount summing to its total.', { param: 'credit_amount' });
      const customer = ctx.store.get<Stripe.Customer>(invoice.customer as string, 'customer');
      const id = newId('cn');
      const count = ctx.store.all<Stripe.CreditNote>('credit_note', (note) => note.invoice === invoice.id).length;
      const note = build<Stripe.CreditNote>('credit_note', {
        id,
        amount: total,
        created: ctx.store.now(customer.id),
        currency: invoice.currency,
        customer: customer.id,
        invoice: invoice.id,
        lines: {
          object: 'list',
          has_more: false,
          url: `/v1/credit_notes/${id}/lines`,
          data: lines.map((line) => ({ ...build<Stripe.CreditNoteLineItem>('credit_note_line_item', { id: newId('cnli'), ...line, type: 'custom_line_item', unit_amount_decimal: String(line.unit_amount) as unknown as Stripe.CreditNoteLineItem['unit_amount_decimal'] }), tax_rates: [] })),
        },
        memo: str(params, 'memo') ?? null,
        metadata: mergeMetadata({}, record(params, 'metadata')),
        number: `${invoice.number}-CN-${String(count + 1).padStart(2, '0')}`,
        status: 'issued',
        subtotal: total,
        total,
        type: paid ? 'post_payment' : 'pre_payment',
        voided_at: null,
      });
      if (paid) {
        invoice.post_payment_credit_notes_amount = (invoice.post_payment_credit_notes_amount ?? 0) + total;
        customer.balance -= total;
      } else {
        invoice.pre_payment_credit_notes_amount = (invoice.pre_payment_credit_notes_amount ?? 0) + total;
        invoice.amount_due -= total;
        invoice.amount_remaining -= total;
      }
      emit(ctx, 'credit_note.created', note);
      return ctx.store.put(note);
    },
  },
  {
    method: 'POST',
    path: '/v1/invoices/:id/pay',
    params: ['payment_method', 'off_session'],
    handle(ctx, params, path) {
      const invoice = ctx.store.get<Stripe.Invoice>(path.id, 'invoice');
      if (invoice.status === 'paid') throw invalidRequest('Invoice is already paid', { code: 'invoice_payment_intent_requires_action' });
      if (invoice.status !== 'open') throw invalidRequest(`You can only pay an open invoice; this one is ${invoice.status}.`, { code: 'invoice_not_editable' });
      const paymentMethod = str(params, 'payment_method');
      if (!charge(ctx, invoice, paymentMethod ? attachedTo(ctx, paymentMethod, invoice.customer as string) : undefined)) {
        throw new StripeApiError(402, 'card_error', DECLINE.message, { code: DECLINE.code, declineCode: DECLINE.declineCode });
      }
      return invoice;
    },
  },
  {
    // https://docs.stripe.com/api/invoices/void: only an open (finalized, unpaid) invoice can be voided.
    method: 'POST',
    path: '/v1/invoices/:id/void',
    params: [],
    handle(ctx, _params, path) {
      const invoice = ctx.store.get<Stripe.Invoice>(path.id, 'invoice');
      if (invoice.status !== 'open') throw invalidRequest(`You can only void an open invoice; this one is ${invoice.status}.`, { code: 'invoice_not_editable' });
      invoice.status = 'void';
      invoice.status_transitions.voided_at = ctx.store.now(invoice.customer as string);
      invoice.next_payment_attempt = null;
      emit(ctx, 'invoice.voided', invoice);
      return invoice;
    },
  },
  {
    method: 'POST',
    path: '/v1/test_helpers/test_clocks',
    params: ['frozen_time', 'name'],
    required: ['frozen_time'],
    handle(ctx, params) {
      const frozen = int(params, 'frozen_time') ?? 0;
      return ctx.store.put(
        build<Stripe.TestHelpers.TestClock>('test_helpers.test_clock', {
          id: newId('clock'),
          created: Math.floor(Date.now() / 1000),
          deletes_after: Math.floor(Date.now() / 1000) + 30 * DAY,
          frozen_time: frozen,
          name: str(params, 'name') ?? null,
          status: 'ready',
          status_details: {},
        }),
      );
    },
  },
  retrieveRoute('/v1/test_helpers/test_clocks/:id', 'test_helpers.test_clock'),
  {
    method: 'POST',
    path: '/v1/test_helpers/test_clocks/:id/advance',
    params: ['frozen_time'],
    required: ['frozen_time'],
    handle(ctx, params, path) {
      const clock = ctx.store.get<Stripe.TestHelpers.TestClock>(path.id, 'test_helpers.test_clock');
      const target = int(params, 'frozen_time') ?? 0;
      if (clock.status !== 'ready') throw invalidRequest('The test clock is already advancing.', { code: 'test_clock_not_ready' });
      if (target <= clock.frozen_time) throw invalidRequest('The frozen_time must be after the current frozen_time of the test clock.', { param: 'frozen_time' });
      // Stripe answers `advancing` and moves the customers' time in the background, then `ready`.
      clock.status = 'advancing';
      emit(ctx, 'test_helpers.test_clock.advancing', clock);
      setImmediate(() => {
        const customers = new Set(ctx.store.all<Stripe.Customer>('customer', (c) => c.test_clock === clock.id).map((c) => c.id));
        billUntil(ctx, (s) => customers.has(s.customer as string), target, () => (clock.frozen_time = target));
        clock.status = 'ready';
        emit(ctx, 'test_helpers.test_clock.ready', clock);
      });
      return { ...clock, frozen_time: clock.frozen_time };
    },
  },
  {
    method: 'DELETE',
    path: '/v1/test_helpers/test_clocks/:id',
    params: [],
    handle(ctx, _params, path) {
      const clock = ctx.store.get<Stripe.TestHelpers.TestClock>(path.id, 'test_helpers.test_clock');
      for (const customer of ctx.store.all<Stripe.Customer>('customer', (c) => c.test_clock === clock.id)) ctx.store.delete(customer.id);
      ctx.store.delete(clock.id);
      return { id: clock.id, object: 'test_helpers.test_clock', deleted: true };
    },
  },
  {
    // Emulator only (Stripe has no such call): moves the time of every customer on no test clock
    // forward, invoicing the periods that end on the way, so `make run` can show a billing cycle.
    method: 'POST',
    path: '/_emulator/advance_time',
    params: ['seconds'],
    required: ['seconds'],
    handle(ctx, params) {
      const seconds = int(params, 'seconds') ?? 0;
      if (seconds <= 0) throw invalidRequest('seconds must be positive', { param: 'seconds' });
      const target = ctx.store.now() + seconds;
      billUntil(
        ctx,
        (s) => !ctx.store.find<Stripe.Customer>(s.customer as string, 'customer')?.test_clock,
        target,
        () => (ctx.store.offsetSeconds += seconds),
      );
      return { object: 'emulator.time', now: ctx.store.now() };
    },
  },
];

function createSubscription(ctx: Context, params: FormParams): Stripe.Subscription {
  const customerId = requiredStr(params, 'customer');
  const customer = ctx.store.get<Stripe.Customer>(customerId, 'customer', 'customer');
  const items = array(params, 'items') ?? [];
  if (!items.length) throw missingParam('items');
  const now = ctx.store.now(customerId);
  const id = newId('sub');
  const prices = items.map((item, index) => {
    if (typeof item !== 'object' || Array.isArray(item) || typeof item.price !== 'string') throw missingParam(`items[${index}][price]`);
    const price = ctx.store.get<Stripe.Price>(item.price, 'price', `items[${index}][price]`);
    if (price.type !== 'recurring') throw invalidRequest(`The price specified is set to \`type=one_time\` but this field only accepts prices with \`type=recurring\`.`, { param: `items[${index}][price]` });
    if (price.recurring?.usage_type === 'metered' && item.quantity !== undefined) {
      throw invalidRequest('Quantity should not be specified where usage_type is `metered`. Remove quantity from `line_items[0]`', { param: `items[${index}][quantity]` });
    }
    if (price.recurring?.usage_type !== 'metered') {
      // Only usage-based prices are emulated; a licensed price would need its amount charged up front.
      throw invalidRequest('The Stripe emulator supports subscriptions to metered prices only.', { param: `items[${index}][price]` });
    }
    return price;
  });
  const [first] = prices;
  if (!first) throw missingParam('items');
  const end = addInterval(now, recurringOf(first));
  const subscription = build<Stripe.Subscription>('subscription', {
    id,
    billing_cycle_anchor: now,
    billing_cycle_anchor_config: null,
    billing_thresholds: null,
    cancel_at: null,
    cancel_at_period_end: false,
    canceled_at: null,
    collection_method: 'charge_automatically',
    created: now,
    currency: first.currency,
    customer: customerId,
    days_until_due: null,
    default_payment_method: null,
    description: str(params, 'description') ?? null,
    ended_at: null,
    items: {
      object: 'list',
      data: prices.map((price) =>
        build<Stripe.SubscriptionItem>('subscription_item', {
          id: newId('si', 14),
          created: now,
          current_period_start: now,
          current_period_end: end,
          billing_thresholds: null,
          metadata: {},
          plan: planOf(price),
          price,
          quantity: undefined,
          subscription: id,
        }),
      ),
      has_more: false,
      url: `/v1/subscription_items?subscription=${id}`,
    },
    latest_invoice: null,
    metadata: mergeMetadata({}, record(params, 'metadata')),
    next_pending_invoice_item_invoice: null,
    pause_collection: null,
    pending_invoice_item_interval: null,
    pending_update: null,
    schedule: null,
    start_date: now,
    status: 'active',
    test_clock: customer.test_clock,
    transfer_data: null,
    trial_end: null,
    trial_start: null,
  });
  applyCollection(subscription, params);
  const paymentMethod = str(params, 'default_payment_method');
  if (paymentMethod) subscription.default_payment_method = attachedTo(ctx, paymentMethod, customerId);
  ctx.store.put(subscription);
  emit(ctx, 'customer.subscription.created', subscription);
  // The first invoice of a usage-based subscription is for $0 and is paid at once, as Stripe does.
  bill(ctx, subscription, now, now, 'subscription_create');
  return subscription;
}

function applyCollection(subscription: Stripe.Subscription, params: FormParams): void {
  const method = str(params, 'collection_method');
  const days = int(params, 'days_until_due');
  if (method !== undefined && method !== 'charge_automatically' && method !== 'send_invoice') {
    throw invalidRequest('Invalid collection_method: must be one of charge_automatically or send_invoice', { param: 'collection_method' });
  }
  const next = method ?? subscription.collection_method;
  // https://docs.stripe.com/api/subscriptions/update#update_subscription-days_until_due
  if (next === 'send_invoice' && days === undefined && subscription.days_until_due === null) throw missingParam('days_until_due');
  if (next === 'charge_automatically' && days !== undefined) {
    throw invalidRequest('Can only specify days_until_due when collection_method is send_invoice', { param: 'days_until_due' });
  }
  subscription.collection_method = next;
  subscription.days_until_due = next === 'send_invoice' ? (days ?? subscription.days_until_due) : null;
}

function attachedTo(ctx: Context, paymentMethodId: string, customerId: string): string {
  const paymentMethod = ctx.store.get<Stripe.PaymentMethod>(paymentMethodId, 'payment_method', 'default_payment_method');
  if (paymentMethod.customer !== customerId) {
    throw invalidRequest(`The customer does not have a payment method with the ID ${paymentMethodId}. The payment method must be attached to the customer.`, {
      code: 'resource_missing',
      param: 'default_payment_method',
    });
  }
  return paymentMethodId;
}

function planOf(price: Stripe.Price): Stripe.Plan {
  const recurring = recurringOf(price);
  return {
    id: price.id,
    object: 'plan',
    active: price.active,
    amount: price.unit_amount,
    amount_decimal: price.unit_amount_decimal,
    billing_scheme: price.billing_scheme,
    created: price.created,
    currency: price.currency,
    interval: recurring.interval,
    interval_count: recurring.interval_count,
    livemode: false,
    metadata: price.metadata,
    meter: recurring.meter,
    nickname: price.nickname,
    product: price.product,
    tiers_mode: null,
    transform_usage: null,
    trial_period_days: null,
    usage_type: recurring.usage_type,
  } as Stripe.Plan;
}

function period(subscription: Stripe.Subscription): { start: number; end: number } {
  const item = firstItem(subscription);
  return { start: item.current_period_start, end: item.current_period_end };
}

/** The subscription an invoice item is for, if it names one. */
function subscriptionOfItem(item: Stripe.InvoiceItem): string | null | undefined {
  return item.parent?.subscription_details?.subscription as string | null | undefined;
}

/** Every subscription the emulator makes has at least one item, each with a recurring metered price. */
function firstItem(subscription: Stripe.Subscription): Stripe.SubscriptionItem {
  const [item] = subscription.items.data;
  if (!item) throw new Error(`subscription ${subscription.id} has no items`);
  return item;
}

function recurringOf(price: Stripe.Price): Stripe.Price.Recurring {
  if (!price.recurring) throw new Error(`price ${price.id} is not recurring`);
  return price.recurring;
}

function meterOf(price: Stripe.Price): string {
  const { meter } = recurringOf(price);
  if (!meter) throw new Error(`price ${price.id} has no meter`);
  return meter;
}

function addInterval(from: number, recurring: { interval: string; interval_count: number }): number {
  const date = new Date(from * 1000);
  const n = recurring.interval_count;
  if (recurring.interval === 'day') date.setUTCDate(date.getUTCDate() + n);
  else if (recurring.interval === 'week') date.setUTCDate(date.getUTCDate() + 7 * n);
  else if (recurring.interval === 'month') date.setUTCMonth(date.getUTCMonth() + n);
  else date.setUTCFullYear(date.getUTCFullYear() + n);
  return Math.floor(date.getTime() / 1000);
}

/**
 * Moves time to `target` for the subscriptions `which` selects: each period that ends on the way is
 * invoiced from the meters (then finalized and charged) and the next one starts.
 */
function billUntil(ctx: Context, which: (subscription: Stripe.Subscription) => boolean, target: number, moveClock: () => void): void {
  const subscriptions = ctx.store.all<Stripe.Subscription>('subscription', (s) => (s.status === 'active' || s.status === 'past_due') && which(s));
  for (const subscription of subscriptions) {
    for (let current = period(subscription); current.end <= target && subscription.status !== 'canceled'; current = period(subscription)) {
      draft(ctx, subscription, current.start, current.end, 'subscription_cycle');
      const before = structuredClone(subscription);
      const next = addInterval(current.end, recurringOf(firstItem(subscription).price));
      for (const item of subscription.items.data) {
        item.current_period_start = current.end;
        item.current_period_end = next;
      }
      if (subscription.cancel_at_period_end) {
        subscription.status = 'canceled';
        subscription.canceled_at = current.end;
        subscription.ended_at = current.end;
        emit(ctx, 'customer.subscription.deleted', subscription);
      } else {
        emitUpdated(ctx, 'customer.subscription.updated', before, subscription);
      }
    }
  }
  moveClock();
  finalizeDrafts(ctx, which);
}

/**
 * Stripe finalizes a renewal invoice about an hour after creating it ("Stripe waits an hour after
 * receiving a successful response to the invoice.created event before attempting payment",
 * https://docs.stripe.com/billing/subscriptions/webhooks); usage of the period reported within that
 * hour is on the invoice, usage reported later is not
 * (https://docs.stripe.com/billing/subscriptions/usage-based/recording-usage-api: events are
 * invoiced in the period of their timestamp while its invoice is a draft).
 */
const FINALIZATION_GRACE_SECONDS = 3600;

/** The draft renewal invoices of the subscriptions `which` selects whose grace is over: priced again from the meters, finalized and charged. */
function finalizeDrafts(ctx: Context, which: (subscription: Stripe.Subscription) => boolean): void {
  const drafts = ctx.store.all<Stripe.Invoice>('invoice', (invoice) => invoice.status === 'draft' && invoice.billing_reason === 'subscription_cycle');
  for (const invoice of drafts) {
    const subscription = ctx.store.find<Stripe.Subscription>(invoice.parent?.subscription_details?.subscription as string, 'subscription');
    if (!subscription || !which(subscription) || ctx.store.now(invoice.customer as string) < invoice.created + FINALIZATION_GRACE_SECONDS) continue;
    const priced = draftInvoice(ctx, subscription, invoice.id, invoice.period_start, invoice.period_end, 'subscription_cycle');
    Object.assign(invoice, { lines: priced.lines, amount_due: priced.amount_due, amount_remaining: priced.amount_remaining, subtotal: priced.subtotal, subtotal_excluding_tax: priced.subtotal_excluding_tax, total: priced.total, total_excluding_tax: priced.total_excluding_tax });
    finalize(ctx, invoice);
  }
}

/** One invoice of a subscription for [start, end): created, finalized, then charged or sent (the first and a closing one: at once). */
function bill(ctx: Context, subscription: Stripe.Subscription, start: number, end: number, reason: Stripe.Invoice.BillingReason): Stripe.Invoice {
  return finalize(ctx, draft(ctx, subscription, start, end, reason));
}

/** A renewal invoice for [start, end), created as a draft (finalized after FINALIZATION_GRACE_SECONDS). */
function draft(ctx: Context, subscription: Stripe.Subscription, start: number, end: number, reason: Stripe.Invoice.BillingReason): Stripe.Invoice {
  const invoice = draftInvoice(ctx, subscription, newId('in'), start, end, reason);
  // Its pending invoice items are on it now.
  for (const line of invoice.lines.data) {
    const itemId = line.parent?.invoice_item_details?.invoice_item;
    if (itemId) ctx.store.get<Stripe.InvoiceItem>(itemId, 'invoiceitem').invoice = invoice.id;
  }
  ctx.store.put(invoice);
  subscription.latest_invoice = invoice.id;
  emit(ctx, 'invoice.created', invoice);
  return invoice;
}

/** A draft finalized: numbered, with its hosted page and PDF (https://docs.stripe.com/invoicing/integration/workflow-transitions), then charged or sent. */
function finalize(ctx: Context, invoice: Stripe.Invoice): Stripe.Invoice {
  const customerId = invoice.customer as string;
  const customer = ctx.store.get<Stripe.Customer>(customerId, 'customer');
  const { id } = invoice;
  const finalizedAt = Math.max(invoice.created, ctx.store.now(customerId));
  const count = ctx.store.all<Stripe.Invoice>('invoice', (i) => i.customer === customerId && i.number !== null).length;
  invoice.status = 'open';
  invoice.number = `${customer.invoice_prefix}-${String(count + 1).padStart(4, '0')}`;
  invoice.effective_at = finalizedAt;
  invoice.status_transitions.finalized_at = finalizedAt;
  invoice.hosted_invoice_url = `${ctx.baseUrl}/invoices/${id}`;
  invoice.invoice_pdf = `${ctx.baseUrl}/invoices/${id}/pdf`;
  emit(ctx, 'invoice.finalized', invoice);
  if (invoice.collection_method !== 'send_invoice') charge(ctx, invoice);
  return invoice;
}

/**
 * A subscription's invoice for [start, end), not stored: one line per price, its meter's usage of the
 * period times the price's `unit_amount_decimal`, rounded to the minor unit once per line
 * (https://docs.stripe.com/billing/subscriptions/usage-based/pricing-models: metered usage is
 * aggregated over the period, then priced).
 */
function draftInvoice(ctx: Context, subscription: Stripe.Subscription, id: string, start: number, end: number, reason: Stripe.Invoice.BillingReason): Stripe.Invoice {
  const customerId = subscription.customer as string;
  const customer = ctx.store.get<Stripe.Customer>(customerId, 'customer');
  const lines = subscription.items.data.map((item) => {
    const price = item.price;
    const meter = ctx.store.get<Stripe.Billing.Meter>(meterOf(price), 'billing.meter');
    const quantity = start < end ? aggregate(ctx, meter, customerId, start, end) : 0;
    const amount = Math.round(quantity * Number(price.unit_amount_decimal));
    return build<Stripe.InvoiceLineItem>('line_item', {
      id: newId('il'),
      amount,
      currency: subscription.currency,
      description: `${quantity} × ${price.nickname ?? meter.display_name}`,
      discount_amounts: [],
      invoice: id,
      metadata: {},
      parent: {
        type: 'subscription_item_details',
        invoice_item_details: null,
        subscription_item_details: { invoice_item: null, proration: false, proration_details: null, subscription: subscription.id, subscription_item: item.id },
      } as Stripe.InvoiceLineItem.Parent,
      period: { start, end },
      pricing: { type: 'price_details', price_details: { price: price.id, product: price.product as string }, unit_amount_decimal: price.unit_amount_decimal } as Stripe.InvoiceLineItem.Pricing,
      quantity,
      subtotal: amount,
      taxes: [],
    });
  });
  // Pending invoice items of the customer (https://docs.stripe.com/api/invoiceitems: "added to the
  // next invoice" of its subscription, or of the customer when it names none), or those on this one.
  const items = ctx.store.all<Stripe.InvoiceItem>(
    'invoiceitem',
    (item) => item.customer === customerId && (item.invoice === id || (item.invoice === null && [undefined, null, subscription.id].includes(subscriptionOfItem(item)))),
  );
  for (const item of items.reverse()) {
    lines.push(
      build<Stripe.InvoiceLineItem>('line_item', {
        id: newId('il'),
        amount: item.amount,
        currency: item.currency,
        description: item.description,
        discount_amounts: [],
        invoice: id,
        metadata: item.metadata ?? {},
        parent: { type: 'invoice_item_details', invoice_item_details: { invoice_item: item.id, proration: false, proration_details: null, subscription: subscription.id }, subscription_item_details: null } as Stripe.InvoiceLineItem.Parent,
        period: item.period,
        pricing: { type: 'price_details', price_details: null, unit_amount_decimal: String(item.amount) } as unknown as Stripe.InvoiceLineItem.Pricing,
        quantity: 1,
        subtotal: item.amount,
        taxes: [],
      }),
    );
  }
  const total = lines.reduce((sum, line) => sum + line.amount, 0);
  const created = end;
  const sendInvoice = subscription.collection_method === 'send_invoice';
  const invoice = build<Stripe.Invoice>('invoice', {
    id,
    amount_due: total,
    amount_paid: 0,
    amount_remaining: total,
    attempt_count: 0,
    attempted: false,
    auto_advance: true,
    billing_reason: reason,
    collection_method: subscription.collection_method,
    created,
    currency: subscription.currency,
    customer: customerId,
    customer_email: customer.email,
    customer_name: customer.name,
    due_date: sendInvoice ? created + (subscription.days_until_due ?? 30) * DAY : null,
    effective_at: null,
    from_invoice: null,
    hosted_invoice_url: null,
    invoice_pdf: null,
    last_finalization_error: null,
    lines: { object: 'list', data: lines, has_more: false, url: `/v1/invoices/${id}/lines` },
    next_payment_attempt: null,
    number: null,
    parent: {
      type: 'subscription_details',
      quote_details: null,
      subscription_details: { metadata: subscription.metadata, subscription: subscription.id },
    } as Stripe.Invoice.Parent,
    period_end: end,
    period_start: start,
    shipping_cost: null,
    shipping_details: null,
    status: 'draft',
    status_transitions: { finalized_at: null, marked_uncollectible_at: null, paid_at: null, voided_at: null },
    subtotal: total,
    subtotal_excluding_tax: total,
    test_clock: customer.test_clock,
    total,
    total_excluding_tax: total,
  });
  delete (invoice as unknown as Record<string, unknown>).subscription;
  return invoice;
}

/**
 * Charges an open invoice with the given card, the subscription's default or the customer's
 * default; a $0 invoice is paid without one. A failed charge leaves it open and the subscription past_due.
 */
function charge(ctx: Context, invoice: Stripe.Invoice, paymentMethodId?: string): boolean {
  const customer = ctx.store.get<Stripe.Customer>(invoice.customer as string, 'customer');
  const subscriptionId = invoice.parent?.subscription_details?.subscription as string | undefined;
  const subscription = subscriptionId ? ctx.store.find<Stripe.Subscription>(subscriptionId, 'subscription') : undefined;
  const chosen = paymentMethodId ?? (subscription?.default_payment_method as string | null) ?? (customer.invoice_settings.default_payment_method as string | null);
  const paymentMethod = chosen ? ctx.store.find<Stripe.PaymentMethod>(chosen, 'payment_method') : undefined;
  const now = ctx.store.now(customer.id);
  const succeeded = invoice.amount_remaining === 0 || (paymentMethod !== undefined && !cardOf(paymentMethod)?.declinesCharges);
  if (invoice.amount_remaining > 0) {
    invoice.attempted = true;
    invoice.attempt_count += 1;
  }
  if (succeeded) {
    invoice.amount_paid = invoice.amount_due;
    invoice.amount_remaining = 0;
    invoice.status = 'paid';
    invoice.status_transitions.paid_at = Math.max(now, invoice.created);
    invoice.next_payment_attempt = null;
    emit(ctx, 'invoice.paid', invoice);
    emit(ctx, 'invoice.payment_succeeded', invoice);
    if (subscription?.status === 'past_due') setStatus(ctx, subscription, 'active');
    return true;
  }
  invoice.next_payment_attempt = invoice.created + 3 * DAY;
  emit(ctx, 'invoice.payment_failed', invoice);
  if (subscription?.status === 'active') setStatus(ctx, subscription, 'past_due');
  return false;
}

function setStatus(ctx: Context, subscription: Stripe.Subscription, status: Stripe.Subscription.Status): void {
  const before = structuredClone(subscription);
  subscription.status = status;
  emitUpdated(ctx, 'customer.subscription.updated', before, subscription);
}
