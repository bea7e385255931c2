import type Stripe from 'stripe';
import { bool, emit, int, LIST_PARAMS, list, listRoute, mergeMetadata, record, requiredStr, retrieveRoute, str, type Context, type Route } from './api.ts';
import { invalidRequest, missingParam } from './errors.ts';
import type { FormParams } from './form.ts';
import { build, newId } from './store.ts';

/**
 * Products (https://docs.stripe.com/api/products), Prices (https://docs.stripe.com/api/prices),
 * Billing Meters, meter events and their summaries (https://docs.stripe.com/api/billing/meter,
 * https://docs.stripe.com/api/billing/meter-event, https://docs.stripe.com/api/billing/meter-event-summary).
 */

/** How long Stripe refuses a meter event identifier it accepted ("at least 24 hours"; exactly 24 here). */
export const METER_EVENT_IDENTIFIER_WINDOW_SECONDS = 24 * 3600;

export const catalogRoutes: Route[] = [
  {
    method: 'POST',
    path: '/v1/products',
    params: ['id', 'name', 'description', 'metadata', 'unit_label', 'active'],
    required: ['name'],
    handle(ctx, params) {
      const id = str(params, 'id') ?? newId('prod', 14);
      if (ctx.store.any(id)) throw invalidRequest('Product already exists.', { code: 'resource_already_exists', param: 'id' });
      const product = ctx.store.put(
        build<Stripe.Product>('product', {
          id,
          active: bool(params, 'active') ?? true,
          created: ctx.store.now(),
          default_price: null,
          description: str(params, 'description') ?? null,
          metadata: mergeMetadata({}, record(params, 'metadata')),
          name: requiredStr(params, 'name'),
          package_dimensions: null,
          type: 'service',
          unit_label: str(params, 'unit_label') ?? null,
          updated: ctx.store.now(),
        }),
      );
      emit(ctx, 'product.created', product);
      return product;
    },
  },
  retrieveRoute('/v1/products/:id', 'product'),
  listRoute<Stripe.Product>('/v1/products', 'product', { active: (p, v) => String(p.active) === v, ids: (p, v) => v.includes(p.id) }),
  {
    method: 'POST',
    path: '/v1/prices',
    params: ['currency', 'product', 'product_data[name]', 'product_data[unit_label]', 'product_data[metadata]', 'unit_amount', 'unit_amount_decimal', 'recurring[interval]', 'recurring[interval_count]', 'recurring[usage_type]', 'recurring[meter]', 'lookup_key', 'transfer_lookup_key', 'nickname', 'metadata', 'billing_scheme', 'active', 'tax_behavior'],
    required: ['currency'],
    handle: (ctx, params) => createPrice(ctx, params),
  },
  retrieveRoute('/v1/prices/:id', 'price'),
  listRoute<Stripe.Price>('/v1/prices', 'price', {
    active: (p, v) => String(p.active) === v,
    product: (p, v) => p.product === v,
    lookup_keys: (p, v) => p.lookup_key !== null && v.includes(p.lookup_key),
    currency: (p, v) => p.currency === v,
    type: (p, v) => p.type === v,
  }),
  {
    method: 'POST',
    path: '/v1/billing/meters',
    params: ['display_name', 'event_name', 'default_aggregation[formula]', 'customer_mapping[event_payload_key]', 'customer_mapping[type]', 'value_settings[event_payload_key]', 'event_time_window'],
    required: ['display_name', 'event_name', 'default_aggregation'],
    handle(ctx, params) {
      const eventName = requiredStr(params, 'event_name');
      const formula = record(params, 'default_aggregation')?.formula;
      if (formula !== 'sum' && formula !== 'count' && formula !== 'last') throw invalidRequest('Invalid default_aggregation[formula]: must be one of sum, count or last', { param: 'default_aggregation[formula]' });
      if (ctx.store.all<Stripe.Billing.Meter>('billing.meter', (m) => m.status === 'active' && m.event_name === eventName).length) {
        throw invalidRequest(`An active meter with event_name \`${eventName}\` already exists.`, { param: 'event_name' });
      }
      const customerKey = record(params, 'customer_mapping')?.event_payload_key;
      const valueKey = record(params, 'value_settings')?.event_payload_key;
      const now = ctx.store.now();
      return ctx.store.put(
        build<Stripe.Billing.Meter>('billing.meter', {
          id: newId('mtr_test', 28),
          created: now,
          customer_mapping: { event_payload_key: typeof customerKey === 'string' ? customerKey : 'stripe_customer_id', type: 'by_id' },
          default_aggregation: { formula },
          display_name: requiredStr(params, 'display_name'),
          event_name: eventName,
          event_time_window: (str(params, 'event_time_window') as Stripe.Billing.Meter['event_time_window']) ?? null,
          livemode: false,
          status: 'active',
          updated: now,
          value_settings: { event_payload_key: typeof valueKey === 'string' ? valueKey : 'value' },
        }),
      );
    },
  },
  retrieveRoute('/v1/billing/meters/:id', 'billing.meter'),
  listRoute<Stripe.Billing.Meter>('/v1/billing/meters', 'billing.meter', { status: (m, v) => m.status === v }),
  {
    method: 'POST',
    path: '/v1/billing/meter_events',
    params: ['event_name', 'payload', 'identifier', 'timestamp'],
    required: ['event_name', 'payload'],
    handle(ctx, params) {
      const eventName = requiredStr(params, 'event_name');
      const payload = record(params, 'payload') ?? {};
      const identifier = str(params, 'identifier') ?? newId('mev');
      // "Max length: 100" (MeterEventCreateParams.identifier, stripe-node types).
      if (identifier.length > 100) throw invalidRequest('Invalid identifier: must be at most 100 characters', { param: 'identifier' });
      const meter = ctx.store.all<Stripe.Billing.Meter>('billing.meter', (m) => m.status === 'active' && m.event_name === eventName)[0];
      if (!meter) throw invalidRequest(`No active meter found for event_name \`${eventName}\`.`, { param: 'event_name' });
      const customerId = payload[meter.customer_mapping.event_payload_key];
      if (typeof customerId !== 'string') throw missingParam(`payload[${meter.customer_mapping.event_payload_key}]`);
      const value = payload[meter.value_settings.event_payload_key];
      // "The numerical usage value in the payload only accepts whole number values" (docs.stripe.com,
      // billing/subscriptions/usage-based/recording-usage-api, Usage values); negative ones count.
      if (typeof value !== 'string' || !/^-?\d+$/.test(value)) {
        throw invalidRequest(`Invalid payload[${meter.value_settings.event_payload_key}]: must be a whole number`, { param: `payload[${meter.value_settings.event_payload_key}]` });
      }
      const now = ctx.store.now(customerId);
      // "We will enforce uniqueness within a rolling period of at least 24 hours" (identifier, stripe-node
      // types): a repeat within it is refused, not absorbed, with Stripe's 400 (quoted in
      // langfuse/langfuse#16292); after it, the same identifier is a new event, counted again.
      const accepted = ctx.store.meterEventIdentifiers.get(identifier);
      if (accepted !== undefined && now - accepted < METER_EVENT_IDENTIFIER_WINDOW_SECONDS) {
        throw invalidRequest(`An event already exists with identifier ${identifier}.`, { param: 'identifier' });
      }
      // "Must be within the past 35 calendar days or up to 5 minutes in the future" (the customer's time on a test clock).
      const timestamp = int(params, 'timestamp') ?? now;
      if (timestamp < now - 35 * 86_400 || timestamp > now + 300) {
        throw invalidRequest('The timestamp must be within the past 35 calendar days or up to 5 minutes in the future.', { param: 'timestamp' });
      }
      const event = { event_name: eventName, identifier, payload: payload as Record<string, string>, timestamp, created: now };
      ctx.store.meterEventIdentifiers.set(identifier, now);
      // The customer is checked asynchronously: an unknown one is accepted here, never counted, and
      // reported later in a `v1.billing.meter.error_report_triggered` thin event with the error code
      // `meter_event_customer_not_found` (https://docs.stripe.com/billing/subscriptions/usage-based/recording-usage-api,
      // "Handle meter event errors"; the codes are stripe-node's V1BillingMeterErrorReportTriggeredEvent).
      if (!ctx.store.find(customerId, 'customer')) reportMeterError(ctx, meter, identifier, 'meter_event_customer_not_found', `No customer found with the ID ${customerId}.`);
      else ctx.store.meterEvents.push(event);
      return { object: 'billing.meter_event', livemode: false, ...event };
    },
  },
  {
    // https://docs.stripe.com/api/billing/meter-event-adjustment/create: `type: cancel` cancels an
    // event by its identifier, "within 24 hours of Stripe receiving" it
    // (https://docs.stripe.com/billing/subscriptions/usage-based/recording-usage-api#cancel-events);
    // Stripe applies it asynchronously (`status: pending`), and one it cannot apply changes nothing.
    method: 'POST',
    path: '/v1/billing/meter_event_adjustments',
    params: ['event_name', 'type', 'cancel'],
    required: ['event_name', 'type'],
    handle(ctx, params) {
      const eventName = requiredStr(params, 'event_name');
      const type = str(params, 'type');
      if (type !== 'cancel') throw invalidRequest('Invalid type: must be cancel', { param: 'type' });
      const identifier = record(params, 'cancel')?.identifier;
      if (typeof identifier !== 'string' || !identifier) throw missingParam('cancel[identifier]');
      const index = ctx.store.meterEvents.findLastIndex((event) => event.event_name === eventName && event.identifier === identifier);
      const event = ctx.store.meterEvents[index];
      const meter = ctx.store.all<Stripe.Billing.Meter>('billing.meter', (m) => m.event_name === eventName)[0];
      const customer = event && meter ? event.payload[meter.customer_mapping.event_payload_key] : undefined;
      if (event && ctx.store.now(customer) - event.created < 86_400) ctx.store.meterEvents.splice(index, 1);
      return { object: 'billing.meter_event_adjustment', cancel: { identifier }, event_name: eventName, livemode: false, status: 'pending', type: 'cancel' };
    },
  },
  {
    method: 'GET',
    path: '/v1/billing/meters/:id/event_summaries',
    params: [...LIST_PARAMS, 'customer', 'start_time', 'end_time', 'value_grouping_window'],
    required: ['customer', 'start_time', 'end_time'],
    handle(ctx, params, path) {
      const meter = ctx.store.get<Stripe.Billing.Meter>(path.id, 'billing.meter');
      const customer = requiredStr(params, 'customer');
      const start = int(params, 'start_time') ?? 0;
      const end = int(params, 'end_time') ?? 0;
      const grouping = str(params, 'value_grouping_window');
      // "start_time and end_time must be aligned with minute boundaries" (and hour/day ones when grouped).
      const step = grouping === 'hour' ? 3600 : grouping === 'day' ? 86_400 : grouping === undefined ? 60 : 0;
      if (!step) throw invalidRequest('Invalid value_grouping_window: must be one of hour or day', { param: 'value_grouping_window' });
      if (start % step || end % step) throw invalidRequest(`start_time and end_time must be aligned with ${grouping ?? 'minute'} boundaries.`, { param: 'start_time' });
      if (end <= start) throw invalidRequest('end_time must be after start_time.', { param: 'end_time' });
      const windows: [number, number][] = grouping ? [] : [[start, end]];
      for (let from = start; grouping && from < end; from += step) windows.push([from, Math.min(from + step, end)]);
      const summaries = windows.reverse().map(([from, to]) => ({
        id: newId('mtrusg_test'),
        object: 'billing.meter_event_summary',
        aggregated_value: aggregate(ctx, meter, customer, from, to),
        end_time: to,
        livemode: false,
        meter: meter.id,
        start_time: from,
      }));
      return list(`/v1/billing/meters/${meter.id}/event_summaries`, summaries, params);
    },
  },
];

/**
 * A meter error report for one event (Stripe gathers errors over a window and samples them; the
 * emulator reports each at once, its window the event's second).
 */
function reportMeterError(ctx: Context, meter: Stripe.Billing.Meter, identifier: string, code: string, message: string): void {
  const at = new Date(ctx.store.now() * 1000).toISOString();
  ctx.webhooks.emitThin(
    'v1.billing.meter.error_report_triggered',
    { id: meter.id, type: 'billing.meter', url: `/v1/billing/meters/${meter.id}` },
    {
      developer_message_summary: `There is 1 invalid event: ${message}`,
      reason: { error_count: 1, error_types: [{ code, error_count: 1, sample_errors: [{ error_message: message, request: { identifier } }] }] },
      validation_start: at,
      validation_end: at,
    },
  );
}

/** The meter's aggregation of a customer's events with `from <= timestamp < to`. */
export function aggregate(ctx: Context, meter: Stripe.Billing.Meter, customer: string, from: number, to: number): number {
  const values: number[] = [];
  for (const event of ctx.store.meterEvents) {
    if (event.event_name !== meter.event_name || event.payload[meter.customer_mapping.event_payload_key] !== customer) continue;
    if (event.timestamp >= from && event.timestamp < to) values.push(Number(event.payload[meter.value_settings.event_payload_key]));
  }
  if (meter.default_aggregation.formula === 'count') return values.length;
  if (meter.default_aggregation.formula === 'last') return values.at(-1) ?? 0;
  return values.reduce((sum, value) => sum + value, 0);
}

function createPrice(ctx: Context, params: FormParams): Stripe.Price {
  let product = str(params, 'product');
  const productData = record(params, 'product_data');
  if (product && productData) throw invalidRequest('You may only specify one of these parameters: product, product_data.', { param: 'product' });
  if (productData) {
    const name = productData.name;
    if (typeof name !== 'string') throw missingParam('product_data[name]');
    const unitLabel = typeof productData.unit_label === 'string' ? productData.unit_label : null;
    const metadata = mergeMetadata({}, record(productData, 'metadata'));
    const now = ctx.store.now();
    product = ctx.store.put(
      build<Stripe.Product>('product', { id: newId('prod', 14), name, created: now, default_price: null, description: null, metadata, package_dimensions: null, type: 'service', unit_label: unitLabel, updated: now }),
    ).id;
  }
  if (!product) throw missingParam('product');
  ctx.store.get<Stripe.Product>(product, 'product', 'product');
  const recurring = record(params, 'recurring');
  const usageType = recurring?.usage_type ?? 'licensed';
  const meter = recurring?.meter;
  // Since API version 2025-03-31.basil a metered price must be backed by a Billing Meter.
  if (usageType === 'metered' && typeof meter !== 'string') throw missingParam('recurring[meter]');
  if (typeof meter === 'string') ctx.store.get(meter, 'billing.meter', 'recurring[meter]');
  const interval = recurring?.interval;
  if (recurring && interval !== 'day' && interval !== 'week' && interval !== 'month' && interval !== 'year') throw missingParam('recurring[interval]');
  const unitAmount = int(params, 'unit_amount');
  const unitAmountDecimal = str(params, 'unit_amount_decimal');
  if (unitAmount !== undefined && unitAmountDecimal !== undefined) throw invalidRequest('You may only specify one of these parameters: unit_amount, unit_amount_decimal.', { param: 'unit_amount' });
  if (unitAmount === undefined && unitAmountDecimal === undefined) throw missingParam('unit_amount');
  if (unitAmountDecimal !== undefined && !/^\d+(\.\d{1,12})?$/.test(unitAmountDecimal)) throw invalidRequest(`Invalid decimal: ${unitAmountDecimal}`, { param: 'unit_amount_decimal' });
  const lookupKey = str(params, 'lookup_key');
  if (lookupKey) {
    const holder = ctx.store.all<Stripe.Price>('price', (p) => p.lookup_key === lookupKey)[0];
    if (holder && !bool(params, 'transfer_lookup_key')) throw invalidRequest(`A price (\`${holder.id}\`) already uses that lookup key.`, { param: 'lookup_key' });
    if (holder) holder.lookup_key = null;
  }
  const decimal = unitAmountDecimal ?? String(unitAmount);
  const price = ctx.store.put(
    build<Stripe.Price>('price', {
      id: newId('price'),
      active: bool(params, 'active') ?? true,
      billing_scheme: 'per_unit',
      created: ctx.store.now(),
      currency: requiredStr(params, 'currency').toLowerCase(),
      custom_unit_amount: null,
      lookup_key: lookupKey ?? null,
      metadata: mergeMetadata({}, record(params, 'metadata')),
      nickname: str(params, 'nickname') ?? null,
      product,
      recurring: recurring
        ? ({ interval, interval_count: Number(recurring.interval_count ?? 1), meter: typeof meter === 'string' ? meter : null, usage_type: usageType, trial_period_days: null } as Stripe.Price.Recurring)
        : null,
      tax_behavior: 'unspecified',
      tiers_mode: null,
      transform_quantity: null,
      type: recurring ? 'recurring' : 'one_time',
      unit_amount: /^\d+$/.test(decimal) ? Number(decimal) : null,
      unit_amount_decimal: decimal as unknown as Stripe.Price['unit_amount_decimal'],
    }),
  );
  emit(ctx, 'price.created', price);
  return price;
}
