/**
 * The payment processor port: every call billing makes to a processor, in our terms. One
 * implementation (`src/adapters/stripe.ts`) runs on the official `stripe` SDK, against Stripe or,
 * for `make run` and the tests, against the local Stripe emulator (`dev/stripe/`): one code path.
 *
 * Each call that creates something takes `key`, derived from our own row ids, and sends it as the
 * processor's idempotency key, so a retried job never creates a second customer, session or
 * subscription. A processor failure surfaces as `PaymentProcessorError` (billing answers 502
 * `PAYMENT_PROCESSOR_ERROR` and writes nothing).
 */
import { AppError } from '../errors.ts';

/**
 * The meters the service reports (DESIGN.md §3), by their event names at the processor. Their
 * events carry the usage's amount, priced per service key, in millionths of a dollar
 * (src/billing/usage-reporting.ts): the unit an invoice line counts.
 */
export const METERS = {
  gpu_instance_seconds: { displayName: 'GPU instance seconds (USD)', unit: 'micro-USD' },
  hosted_tokens: { displayName: 'Hosted model tokens (USD)', unit: 'micro-USD' },
} as const;
export type MeterName = keyof typeof METERS;

export interface ProcessorCustomer {
  id: string;
  defaultPaymentMethodId: string | null;
}

export interface ProcessorCheckoutSession {
  id: string;
  /** The processor's page to enter a card (hosted mode). */
  url: string | null;
  clientSecret: string | null;
  mode: string;
  /** `open`, `complete` or `expired`. */
  status: string;
  paymentStatus: string;
  expiresAt: Date;
  setupIntentId: string | null;
  customerId: string | null;
  metadata: Record<string, string>;
}

export interface ProcessorPaymentMethod {
  id: string;
  customerId: string | null;
  brand: string;
  last4: string;
  expMonth: number;
  expYear: number;
  allowRedisplay: string;
}

export interface ProcessorSubscription {
  id: string;
  customerId: string;
  status: string;
  /** `charge_automatically` or `send_invoice`. */
  collectionMethod: string;
  currentPeriodStart: Date;
  currentPeriodEnd: Date;
  defaultPaymentMethodId: string | null;
  /** Subscription item per meter, with its price. */
  items: { id: string; priceId: string; meterId: string | null }[];
}

export interface ProcessorInvoice {
  id: string;
  customerId: string;
  subscriptionId: string | null;
  status: string;
  collectionMethod: string;
  amountDue: number;
  amountPaid: number;
  currency: string;
  hostedInvoiceUrl: string | null;
  invoicePdf: string | null;
  dueDate: Date | null;
  periodStart: Date;
  periodEnd: Date;
  created: Date;
  /** Set when the invoice is finalized. */
  number: string | null;
  subtotal: number;
  /** The taxes on it (its total less its total before tax). */
  tax: number;
  total: number;
  lines: ProcessorInvoiceLine[];
}

/** One line of an invoice: a metered price's usage of its period, or another item. */
export interface ProcessorInvoiceLine {
  description: string | null;
  priceId: string | null;
  quantity: number | null;
  amount: number;
  periodStart: Date;
  periodEnd: Date;
}

export interface ProcessorSetupIntent {
  id: string;
  customerId: string | null;
  status: string;
  paymentMethodId: string | null;
}

/** A meter with the metered price billing subscribes organizations to. */
export interface ProcessorMeterPrice {
  meter: MeterName;
  meterId: string;
  priceId: string;
  /** Smallest currency unit per unit of the meter, as a decimal string. */
  unitAmountDecimal: string;
}

/** An event the processor sent, verified; `objectId` is what the handler re-reads. */
export interface ProcessorEvent {
  id: string;
  type: string;
  created: Date;
  objectType: string;
  objectId: string;
  /**
   * The customer the object belongs to, read from the payload (a detached card's previous
   * customer; the object itself for customer events): it says whose state to re-read, never the state.
   */
  customerId: string | null;
}

export interface CustomerInput {
  key: string;
  organizationId: number;
  name: string;
  email?: string;
}

export interface SetupSessionInput {
  key: string;
  customerId: string;
  currency: string;
  ui: 'embedded' | 'hosted';
  returnUrl: string;
  metadata: Record<string, string>;
}

export interface SubscriptionInput {
  key: string;
  customerId: string;
  priceIds: string[];
  defaultPaymentMethodId?: string;
  metadata: Record<string, string>;
}

export interface MeterPricesInput {
  currency: string;
  /** Smallest currency unit per unit of each meter, as a decimal string (`"0.05"` cents a second). */
  unitAmountDecimal: Record<MeterName, string>;
}

export interface MeterEventInput {
  meter: MeterName;
  customerId: string;
  value: number;
  identifier: string;
  timestamp: Date;
}

export interface MeterTotalInput {
  meterId: string;
  customerId: string;
  start: Date;
  end: Date;
}

export interface PaymentProcessor {
  /**
   * The customer for an organization, created once per `key` (from the organization id). The key
   * holds for 24 hours (Stripe's idempotency window): billing stores the customer id and calls this
   * only while it has none.
   */
  ensureCustomer(input: CustomerInput): Promise<ProcessorCustomer>;
  getCustomer(customerId: string): Promise<ProcessorCustomer>;
  /**
   * A Checkout Session in setup mode, to save a card (both purposes of the setup-session route):
   * `embedded` gives a `clientSecret` for the web app to mount Checkout and comes back to
   * `returnUrl`; `hosted` gives the processor's page `url`, which leads to `returnUrl` either way.
   */
  createSetupCheckoutSession(input: SetupSessionInput): Promise<ProcessorCheckoutSession>;
  getCheckoutSession(sessionId: string): Promise<ProcessorCheckoutSession>;
  getSetupIntent(setupIntentId: string): Promise<ProcessorSetupIntent>;
  listPaymentMethods(customerId: string): Promise<ProcessorPaymentMethod[]>;
  getPaymentMethod(paymentMethodId: string): Promise<ProcessorPaymentMethod>;
  detachPaymentMethod(paymentMethodId: string): Promise<void>;
  /** Sets `invoice_settings.default_payment_method`; the card must be attached to the customer. */
  setDefaultPaymentMethod(customerId: string, paymentMethodId: string): Promise<ProcessorCustomer>;
  /** A subscription to the metered prices, collected from the default card (`key` from the billing account id). */
  createSubscription(input: SubscriptionInput): Promise<ProcessorSubscription>;
  getSubscription(subscriptionId: string): Promise<ProcessorSubscription>;
  setCollectionMethod(subscriptionId: string, method: 'charge_automatically' | 'send_invoice', daysUntilDue?: number): Promise<ProcessorSubscription>;
  listInvoices(customerId: string, options?: { limit?: number; startingAfter?: string }): Promise<{ invoices: ProcessorInvoice[]; hasMore: boolean }>;
  getInvoice(invoiceId: string): Promise<ProcessorInvoice>;
  createPortalSession(input: { customerId: string; returnUrl: string }): Promise<{ url: string }>;
  /** Finds or creates each meter, its product and its price (by lookup key), at the given unit amounts. */
  ensureMeterPrices(input: MeterPricesInput): Promise<ProcessorMeterPrice[]>;
  /**
   * One usage report. `duplicate`: the processor refused it because it holds an event of this
   * `identifier` already (Stripe's 400 "An event already exists with identifier …"), which it counts
   * once; it enforces that only within a window (at least 24 hours), after which a repeat counts again.
   */
  reportMeterEvent(input: MeterEventInput): Promise<'accepted' | 'duplicate'>;
  /** The meter's total for a customer over [start, end), minute-aligned (the processor's summary). */
  meterTotal(input: MeterTotalInput): Promise<number>;
  /** The meter's totals for a customer per day (UTC) over [start, end), day-aligned: day start (ms) → total; days with none left out. */
  meterDailyTotals(input: MeterTotalInput): Promise<Map<number, number>>;
  /** Checks the signature of a webhook on its raw body; throws `WebhookSignatureError` when it does not hold. */
  verifyWebhook(rawBody: Buffer | string, signatureHeader: string | undefined): ProcessorEvent;
  /**
   * Checks the signature of a thin event (an event destination's notification: the event's id, type
   * and related object, no data) on its raw body; throws `WebhookSignatureError` when it does not hold.
   */
  verifyEventNotification(rawBody: Buffer | string, signatureHeader: string | undefined): ProcessorEvent;
  /** A pending invoice item (an amount in cents) for the subscription's next invoice, created once per `key`. */
  createInvoiceItem(input: { customerId: string; subscriptionId: string | null; amountCents: number; currency: string; description: string; key: string }): Promise<{ id: string }>;
  /**
   * A credit note (one custom line of `amountCents`) on a finalized invoice, created once per `key`;
   * on a paid invoice the credit goes to the customer's balance (applied to the next invoice).
   */
  createCreditNote(input: { invoiceId: string; paid: boolean; amountCents: number; description: string; key: string }): Promise<{ id: string; number: string | null }>;
  /** The meter errors a `v1.billing.meter.error_report_triggered` event reports (fetched by its id). */
  getMeterErrorReport(eventId: string): Promise<MeterErrorReport>;
}

/**
 * Meter events the processor accepted and then refused (Stripe validates most asynchronously): per
 * error code, how many, and samples naming the events by identifier.
 */
export interface MeterErrorReport {
  meterId: string;
  errorCount: number;
  errors: Array<{ code: string; count: number; samples: Array<{ identifier: string; message: string }> }>;
}

/** The processor, or the 501 a server without one (no STRIPE_SECRET_KEY, no emulator) answers. */
export function requireProcessor(processor: PaymentProcessor | undefined): PaymentProcessor {
  if (!processor) throw new AppError('NOT_IMPLEMENTED', 'No payment processor is configured on this server (STRIPE_SECRET_KEY).');
  return processor;
}

/** The processor failed or refused a call: billing answers 502 PAYMENT_PROCESSOR_ERROR. */
export class PaymentProcessorError extends Error {
  /** The processor's own error code (`card_declined`, `resource_missing`, …), when it gave one. */
  readonly processorCode: string | undefined;
  /** The HTTP status the processor answered, when it answered. */
  readonly processorStatus: number | undefined;

  constructor(message: string, details: { code?: string; status?: number; cause?: unknown } = {}) {
    super(message, { cause: details.cause });
    this.name = 'PaymentProcessorError';
    this.processorCode = details.code;
    this.processorStatus = details.status;
  }
}

/** A webhook whose signature is missing, wrong or too old: the webhook route answers 400. */
export class WebhookSignatureError extends Error {
  override name = 'WebhookSignatureError';
}
