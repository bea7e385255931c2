import Stripe from 'stripe';
import type { Config } from '../config.ts';
import {
  METERS,
  PaymentProcessorError,
  WebhookSignatureError,
  type CustomerInput,
  type MeterErrorReport,
  type MeterEventInput,
  type MeterName,
  type MeterPricesInput,
  type MeterTotalInput,
  type PaymentProcessor,
  type ProcessorCheckoutSession,
  type ProcessorCustomer,
  type ProcessorInvoice,
  type ProcessorMeterPrice,
  type ProcessorPaymentMethod,
  type ProcessorSetupIntent,
  type ProcessorSubscription,
  type SetupSessionInput,
  type SubscriptionInput,
} from '../billing/payment-processor.ts';

/**
 * The payment processor on the official `stripe` SDK, at the API version the SDK pins
 * (`STRIPE_API_VERSION`, sent with every request so a new SDK never changes shapes under us).
 * `apiUrl` points it elsewhere than api.stripe.com (the local Stripe emulator) through the SDK's
 * `host`/`port`/`protocol`: the code path is the same.
 */
export const STRIPE_API_VERSION = '2026-10-28.endive' satisfies typeof Stripe.API_VERSION;

export interface StripeSettings {
  secretKey: string;
  webhookSecret: string;
  /** `http://127.0.0.1:12111` for the emulator; undefined for Stripe itself. */
  apiUrl?: string;
  /** The signing secret of the event destination that sends thin events; the webhook's when unset. */
  eventDestinationSecret?: string;
  /** Accepted age of a webhook's signature timestamp, into the past and the future (Stripe's default: 300 s). */
  webhookToleranceSeconds?: number;
}

export function createStripeClient(settings: Pick<StripeSettings, 'secretKey' | 'apiUrl'>): Stripe {
  const target = settings.apiUrl ? new URL(settings.apiUrl) : undefined;
  return new Stripe(settings.secretKey, {
    apiVersion: STRIPE_API_VERSION,
    maxNetworkRetries: 2,
    timeout: 20_000,
    telemetry: false,
    appInfo: { name: 'model-deployment-service' },
    ...(target
      ? { host: target.hostname, port: Number(target.port || (target.protocol === 'https:' ? 443 : 80)), protocol: target.protocol === 'http:' ? 'http' : 'https' }
      : {}),
  });
}

/** Marks the customer portal configuration this service created (`metadata.created_by`). */
const PORTAL_CONFIGURATION_OWNER = 'model-deployment-service';

export class StripePaymentProcessor implements PaymentProcessor {
  private readonly stripe: Stripe;
  private readonly settings: StripeSettings;
  /** The portal configuration's id (undefined: the account's default), found or created once. */
  #portal: Promise<string | undefined> | undefined;

  constructor(settings: StripeSettings) {
    this.settings = settings;
    this.stripe = createStripeClient(settings);
  }

  ensureCustomer(input: CustomerInput): Promise<ProcessorCustomer> {
    return call(async () =>
      toCustomer(
        await this.stripe.customers.create(
          { name: input.name, email: input.email, metadata: { organization_id: String(input.organizationId) } },
          { idempotencyKey: `customer-${input.key}` },
        ),
      ),
    );
  }

  getCustomer(customerId: string): Promise<ProcessorCustomer> {
    return call(async () => {
      const customer = await this.stripe.customers.retrieve(customerId);
      if (customer.deleted) throw new PaymentProcessorError(`The customer ${customerId} was deleted at the processor.`, { code: 'resource_missing', status: 404 });
      return toCustomer(customer);
    });
  }

  createSetupCheckoutSession(input: SetupSessionInput): Promise<ProcessorCheckoutSession> {
    const ui: Stripe.Checkout.SessionCreateParams =
      input.ui === 'embedded' ? { ui_mode: 'embedded_page', return_url: input.returnUrl } : { ui_mode: 'hosted_page', success_url: input.returnUrl, cancel_url: input.returnUrl };
    return call(async () =>
      toCheckoutSession(
        await this.stripe.checkout.sessions.create(
          {
            mode: 'setup',
            customer: input.customerId,
            currency: input.currency,
            metadata: input.metadata,
            setup_intent_data: { metadata: input.metadata },
            ...ui,
          },
          { idempotencyKey: `checkout-setup-${input.key}` },
        ),
      ),
    );
  }

  getCheckoutSession(sessionId: string): Promise<ProcessorCheckoutSession> {
    return call(async () => toCheckoutSession(await this.stripe.checkout.sessions.retrieve(sessionId)));
  }

  getSetupIntent(setupIntentId: string): Promise<ProcessorSetupIntent> {
    return call(async () => {
      const intent = await this.stripe.setupIntents.retrieve(setupIntentId);
      return { id: intent.id, customerId: idOf(intent.customer), status: intent.status, paymentMethodId: idOf(intent.payment_method) };
    });
  }

  listPaymentMethods(customerId: string): Promise<ProcessorPaymentMethod[]> {
    return call(async () => {
      const methods: ProcessorPaymentMethod[] = [];
      for await (const method of this.stripe.customers.listPaymentMethods(customerId, { type: 'card', limit: 100 })) methods.push(toPaymentMethod(method));
      return methods;
    });
  }

  getPaymentMethod(paymentMethodId: string): Promise<ProcessorPaymentMethod> {
    return call(async () => toPaymentMethod(await this.stripe.paymentMethods.retrieve(paymentMethodId)));
  }

  detachPaymentMethod(paymentMethodId: string): Promise<void> {
    return call(async () => {
      await this.stripe.paymentMethods.detach(paymentMethodId);
    });
  }

  setDefaultPaymentMethod(customerId: string, paymentMethodId: string): Promise<ProcessorCustomer> {
    return call(async () => toCustomer(await this.stripe.customers.update(customerId, { invoice_settings: { default_payment_method: paymentMethodId } })));
  }

  createSubscription(input: SubscriptionInput): Promise<ProcessorSubscription> {
    return call(async () =>
      toSubscription(
        await this.stripe.subscriptions.create(
          {
            customer: input.customerId,
            items: input.priceIds.map((price) => ({ price })),
            collection_method: 'charge_automatically',
            default_payment_method: input.defaultPaymentMethodId,
            metadata: input.metadata,
          },
          { idempotencyKey: `subscription-${input.key}` },
        ),
      ),
    );
  }

  getSubscription(subscriptionId: string): Promise<ProcessorSubscription> {
    return call(async () => toSubscription(await this.stripe.subscriptions.retrieve(subscriptionId)));
  }

  setCollectionMethod(subscriptionId: string, method: 'charge_automatically' | 'send_invoice', daysUntilDue = 30): Promise<ProcessorSubscription> {
    return call(async () =>
      toSubscription(
        await this.stripe.subscriptions.update(subscriptionId, method === 'send_invoice' ? { collection_method: method, days_until_due: daysUntilDue } : { collection_method: method }),
      ),
    );
  }

  listInvoices(customerId: string, options: { limit?: number; startingAfter?: string } = {}): Promise<{ invoices: ProcessorInvoice[]; hasMore: boolean }> {
    return call(async () => {
      const page = await this.stripe.invoices.list({ customer: customerId, limit: options.limit ?? 100, starting_after: options.startingAfter });
      return { invoices: await Promise.all(page.data.map(async (invoice) => toInvoice(await this.withAllLines(invoice)))), hasMore: page.has_more };
    });
  }

  getInvoice(invoiceId: string): Promise<ProcessorInvoice> {
    return call(async () => toInvoice(await this.withAllLines(await this.stripe.invoices.retrieve(invoiceId))));
  }

  /** The invoice with every line: an invoice object carries its first page of lines (10). */
  private async withAllLines(invoice: Stripe.Invoice): Promise<Stripe.Invoice> {
    if (!invoice.lines.has_more || !invoice.id) return invoice;
    const lines: Stripe.InvoiceLineItem[] = [];
    for await (const line of this.stripe.invoices.listLineItems(invoice.id, { limit: 100 })) lines.push(line);
    return { ...invoice, lines: { ...invoice.lines, data: lines, has_more: false } };
  }

  createPortalSession(input: { customerId: string; returnUrl: string }): Promise<{ url: string }> {
    return call(async () => {
      const configuration = await this.#portalConfiguration();
      return { url: (await this.stripe.billingPortal.sessions.create({ customer: input.customerId, return_url: input.returnUrl, configuration })).url };
    });
  }

  /**
   * The portal configuration sessions use: the account's default when its portal settings were saved
   * in the Dashboard, else ours, created through the API once (a fresh account has neither, and
   * Stripe refuses a session without one): invoices and cards, nothing else to change there.
   */
  #portalConfiguration(): Promise<string | undefined> {
    this.#portal ??= (async () => {
      for await (const configuration of this.stripe.billingPortal.configurations.list({ active: true, limit: 100 })) {
        if (configuration.is_default) return undefined;
        if (configuration.metadata?.created_by === PORTAL_CONFIGURATION_OWNER) return configuration.id;
      }
      const created = await this.stripe.billingPortal.configurations.create(
        {
          name: 'Model deployment billing',
          features: { invoice_history: { enabled: true }, payment_method_update: { enabled: true } },
          metadata: { created_by: PORTAL_CONFIGURATION_OWNER },
        },
        { idempotencyKey: `portal-configuration-${PORTAL_CONFIGURATION_OWNER}` },
      );
      return created.id;
    })().catch((error: unknown) => {
      this.#portal = undefined;
      throw error;
    });
    return this.#portal;
  }

  ensureMeterPrices(input: MeterPricesInput): Promise<ProcessorMeterPrice[]> {
    return call(async () => {
      const active = await this.stripe.billing.meters.list({ status: 'active', limit: 100 });
      const prices: ProcessorMeterPrice[] = [];
      for (const meter of Object.keys(METERS) as MeterName[]) {
        const amount = input.unitAmountDecimal[meter];
        const found = active.data.find((candidate) => candidate.event_name === meter);
        const meterId =
          found?.id ??
          (
            await this.stripe.billing.meters.create(
              { display_name: METERS[meter].displayName, event_name: meter, default_aggregation: { formula: 'sum' } },
              { idempotencyKey: `meter-${meter}` },
            )
          ).id;
        const lookupKey = `${meter}_${input.currency}`;
        const existing = (await this.stripe.prices.list({ lookup_keys: [lookupKey], active: true, limit: 1 })).data[0];
        if (existing && existing.recurring?.meter === meterId && String(existing.unit_amount_decimal) === amount) {
          prices.push({ meter, meterId, priceId: existing.id, unitAmountDecimal: amount });
          continue;
        }
        // A new amount is a new price (prices are immutable); the lookup key moves to it.
        const price = await this.stripe.prices.create(
          {
            currency: input.currency,
            unit_amount_decimal: Stripe.Decimal.from(amount),
            recurring: { interval: 'month', usage_type: 'metered', meter: meterId },
            product_data: { name: METERS[meter].displayName, unit_label: METERS[meter].unit },
            lookup_key: lookupKey,
            transfer_lookup_key: true,
          },
          { idempotencyKey: `price-${meterId}-${input.currency}-${amount}` },
        );
        prices.push({ meter, meterId, priceId: price.id, unitAmountDecimal: amount });
      }
      return prices;
    });
  }

  reportMeterEvent(input: MeterEventInput): Promise<'accepted' | 'duplicate'> {
    return call(async () => {
      try {
        await this.stripe.billing.meterEvents.create({
          event_name: input.meter,
          payload: { stripe_customer_id: input.customerId, value: String(input.value) },
          identifier: input.identifier,
          timestamp: Math.floor(input.timestamp.getTime() / 1000),
        });
        return 'accepted';
      } catch (error) {
        // Stripe refuses a repeated identifier (400, `stripe-should-retry: false`); its message is
        // the only mark it has (quoted in langfuse/langfuse#16292 and by other clients).
        if (error instanceof Stripe.errors.StripeInvalidRequestError && error.message.startsWith('An event already exists with identifier')) return 'duplicate';
        throw error;
      }
    });
  }

  meterTotal(input: MeterTotalInput): Promise<number> {
    return call(async () => {
      let total = 0;
      const summaries = this.stripe.billing.meters.listEventSummaries(input.meterId, {
        customer: input.customerId,
        start_time: Math.floor(input.start.getTime() / 1000),
        end_time: Math.floor(input.end.getTime() / 1000),
      });
      for await (const summary of summaries) total += Number(summary.aggregated_value);
      return total;
    });
  }

  meterDailyTotals(input: MeterTotalInput): Promise<Map<number, number>> {
    return call(async () => {
      const totals = new Map<number, number>();
      const summaries = this.stripe.billing.meters.listEventSummaries(input.meterId, {
        customer: input.customerId,
        start_time: Math.floor(input.start.getTime() / 1000),
        end_time: Math.floor(input.end.getTime() / 1000),
        value_grouping_window: 'day',
        limit: 100,
      });
      for await (const summary of summaries) {
        if (summary.aggregated_value) totals.set(summary.start_time * 1000, (totals.get(summary.start_time * 1000) ?? 0) + Number(summary.aggregated_value));
      }
      return totals;
    });
  }

  verifyWebhook(rawBody: Buffer | string, signatureHeader: string | undefined) {
    const event = this.verified(signatureHeader, () =>
      this.stripe.webhooks.constructEvent(rawBody, signatureHeader ?? '', this.settings.webhookSecret, this.settings.webhookToleranceSeconds),
    );
    const object = event.data.object as { id?: string; object?: string; customer?: string | { id: string } | null };
    const previous = (event.data.previous_attributes ?? {}) as { customer?: string | { id: string } | null };
    const customerId = object.object === 'customer' ? (object.id ?? null) : (idOf(object.customer) ?? idOf(previous.customer));
    return { id: event.id, type: event.type, created: new Date(event.created * 1000), objectType: object.object ?? '', objectId: object.id ?? '', customerId };
  }

  verifyEventNotification(rawBody: Buffer | string, signatureHeader: string | undefined) {
    const secret = this.settings.eventDestinationSecret ?? this.settings.webhookSecret;
    const notification = this.verified(signatureHeader, () =>
      this.stripe.parseEventNotification(rawBody, signatureHeader ?? '', secret, this.settings.webhookToleranceSeconds),
    ) as { id: string; type: string; created: string; related_object?: { id: string; type: string } | null };
    const related = notification.related_object;
    return { id: notification.id, type: notification.type, created: new Date(notification.created), objectType: related?.type ?? '', objectId: related?.id ?? '', customerId: null };
  }

  /**
   * Runs a signature check; the SDK bounds only the age of the signature's timestamp, so one ahead
   * of the clock is bounded here by the same tolerance. Any failure is a WebhookSignatureError.
   */
  private verified<T>(signatureHeader: string | undefined, check: () => T): T {
    try {
      const result = check();
      const signedAt = Number(/(?:^|,)\s*t=(\d+)/.exec(signatureHeader ?? '')?.[1]);
      if (!(signedAt - Date.now() / 1000 <= (this.settings.webhookToleranceSeconds ?? 300))) throw new Error('Timestamp is ahead of the clock by more than the tolerance');
      return result;
    } catch (error) {
      throw new WebhookSignatureError(error instanceof Error ? error.message : 'Invalid signature', { cause: error });
    }
  }

  createInvoiceItem(input: { customerId: string; subscriptionId: string | null; amountCents: number; currency: string; description: string; key: string }): Promise<{ id: string }> {
    return call(async () => {
      const item = await this.stripe.invoiceItems.create(
        { customer: input.customerId, amount: input.amountCents, currency: input.currency, description: input.description, ...(input.subscriptionId ? { subscription: input.subscriptionId } : {}) },
        { idempotencyKey: input.key },
      );
      return { id: item.id };
    });
  }

  createCreditNote(input: { invoiceId: string; paid: boolean; amountCents: number; description: string; key: string }): Promise<{ id: string; number: string | null }> {
    return call(async () => {
      const note = await this.stripe.creditNotes.create(
        {
          invoice: input.invoiceId,
          lines: [{ type: 'custom_line_item', description: input.description, quantity: 1, unit_amount: input.amountCents }],
          ...(input.paid ? { credit_amount: input.amountCents } : {}),
        },
        { idempotencyKey: input.key },
      );
      return { id: note.id, number: note.number ?? null };
    });
  }

  async getMeterErrorReport(eventId: string): Promise<MeterErrorReport> {
    return call(async () => {
      const event = (await this.stripe.v2.core.events.retrieve(eventId)) as unknown as MeterErrorEvent;
      if (event.type !== 'v1.billing.meter.error_report_triggered') throw new PaymentProcessorError(`event ${eventId} is a ${event.type}, not a meter error report`);
      return {
        meterId: event.related_object?.id ?? '',
        errorCount: event.data.reason.error_count,
        errors: event.data.reason.error_types.map((type) => ({
          code: type.code,
          count: type.error_count,
          samples: type.sample_errors.map((sample) => ({ identifier: sample.request.identifier, message: sample.error_message })),
        })),
      };
    });
  }
}

/** The fields read of a `v1.billing.meter.error_report_triggered` event (stripe-node's V1BillingMeterErrorReportTriggeredEvent). */
interface MeterErrorEvent {
  type: string;
  related_object?: { id: string } | null;
  data: {
    reason: {
      error_count: number;
      error_types: Array<{ code: string; error_count: number; sample_errors: Array<{ error_message: string; request: { identifier: string } }> }>;
    };
  };
}

/** Runs one SDK call; any Stripe error becomes one PaymentProcessorError (502 on our side). */
async function call<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (error instanceof PaymentProcessorError) throw error;
    if (error instanceof Stripe.errors.StripeError) {
      throw new PaymentProcessorError(error.message, { code: error.code, status: error.statusCode, cause: error });
    }
    throw new PaymentProcessorError(error instanceof Error ? error.message : 'The payment processor failed', { cause: error });
  }
}

function idOf(value: string | { id: string } | null | undefined): string | null {
  return value == null ? null : typeof value === 'string' ? value : value.id;
}

const date = (seconds: number) => new Date(seconds * 1000);

function toCustomer(customer: Stripe.Customer): ProcessorCustomer {
  return { id: customer.id, defaultPaymentMethodId: idOf(customer.invoice_settings.default_payment_method) };
}

function toCheckoutSession(session: Stripe.Checkout.Session): ProcessorCheckoutSession {
  return {
    id: session.id,
    url: session.url,
    clientSecret: session.client_secret,
    mode: session.mode,
    status: session.status ?? 'open',
    paymentStatus: session.payment_status,
    expiresAt: date(session.expires_at),
    setupIntentId: idOf(session.setup_intent),
    customerId: idOf(session.customer),
    metadata: session.metadata ?? {},
  };
}

function toPaymentMethod(method: Stripe.PaymentMethod): ProcessorPaymentMethod {
  return {
    id: method.id,
    customerId: idOf(method.customer),
    brand: method.card?.brand ?? method.type,
    last4: method.card?.last4 ?? '',
    expMonth: method.card?.exp_month ?? 0,
    expYear: method.card?.exp_year ?? 0,
    allowRedisplay: method.allow_redisplay ?? 'unspecified',
  };
}

function toSubscription(subscription: Stripe.Subscription): ProcessorSubscription {
  const first = subscription.items.data[0];
  return {
    id: subscription.id,
    customerId: idOf(subscription.customer) ?? '',
    status: subscription.status,
    collectionMethod: subscription.collection_method,
    currentPeriodStart: date(first?.current_period_start ?? subscription.start_date),
    currentPeriodEnd: date(first?.current_period_end ?? subscription.start_date),
    defaultPaymentMethodId: idOf(subscription.default_payment_method),
    items: subscription.items.data.map((item) => ({ id: item.id, priceId: item.price.id, meterId: item.price.recurring?.meter ?? null })),
  };
}

function toInvoice(invoice: Stripe.Invoice): ProcessorInvoice {
  return {
    id: invoice.id ?? '',
    customerId: idOf(invoice.customer) ?? '',
    subscriptionId: idOf(invoice.parent?.subscription_details?.subscription),
    status: invoice.status ?? 'draft',
    collectionMethod: invoice.collection_method,
    amountDue: invoice.amount_due,
    amountPaid: invoice.amount_paid,
    currency: invoice.currency,
    hostedInvoiceUrl: invoice.hosted_invoice_url ?? null,
    invoicePdf: invoice.invoice_pdf ?? null,
    dueDate: invoice.due_date ? date(invoice.due_date) : null,
    periodStart: date(invoice.period_start),
    periodEnd: date(invoice.period_end),
    created: date(invoice.created),
    number: invoice.number ?? null,
    subtotal: invoice.subtotal,
    tax: invoice.total - (invoice.total_excluding_tax ?? invoice.total),
    total: invoice.total,
    lines: invoice.lines.data.map((line) => ({
      description: line.description ?? null,
      priceId: idOf(line.pricing?.price_details?.price) ?? null,
      quantity: line.quantity ?? null,
      amount: line.amount,
      periodStart: date(line.period.start),
      periodEnd: date(line.period.end),
    })),
  };
}

/**
 * The payment processor: Stripe through its SDK when `STRIPE_SECRET_KEY` is set (`STRIPE_API_URL`,
 * or the emulator `make run` and the tests start, point the SDK elsewhere); none otherwise, and the
 * billing routes that need one answer 501.
 */
export function paymentProcessor(config: Pick<Config, 'stripe'>): PaymentProcessor | undefined {
  const { secretKey, webhookSecret, eventDestinationSecret, apiUrl } = config.stripe;
  if (!secretKey || !webhookSecret) return undefined;
  return new StripePaymentProcessor({ secretKey, webhookSecret, eventDestinationSecret, apiUrl });
}
