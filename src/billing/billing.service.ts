import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import { requireOrganization, roleAtLeast, type SessionPrincipal } from '../principal.ts';
import type { BillingAccountRow } from '../db/models/billing-accounts.ts';
import type { InvoiceRow } from '../db/models/invoices.ts';
import { AppError } from '../errors.ts';
import { findBillingAccount } from './billing.repository.ts';
import { installationId } from './installation.ts';
import { PaymentProcessorError, requireProcessor, type PaymentProcessor, type ProcessorPaymentMethod, type ProcessorSubscription } from './payment-processor.ts';
import { listInvoicesOf, lockAccount, recordCustomer, recordDefaultPaymentMethod, recordSubscription } from './processor-state.repository.ts';
import { METER_PRICES } from './usage-reporting.ts';
import { usageSummary, type UsageSummary } from '../metering/usage-summary.ts';
import { openUsageExport, type UsageExport, type UsageExportGroupBy } from './usage-export.ts';

type Schemas = components['schemas'];
export type CollectionMethod = Schemas['CollectionMethod'];
export type CheckoutPurpose = Schemas['CheckoutPurpose'];

/** Subscription statuses after which a new subscription is needed (Stripe: terminal). */
const ENDED_SUBSCRIPTION = new Set(['canceled', 'incomplete_expired']);

export interface BillingSettings {
  publishableKey: string | undefined;
  /** Where the processor's pages lead back by default: the web app's billing page. */
  billingPageUrl: string;
  allowedOrigins: readonly string[];
  enforcement: boolean;
}

/**
 * The billing routes of an organization (interface: Billing). Processor state is written only after
 * the processor accepted the change, in one statement or transaction, so a processor failure (502
 * `PAYMENT_PROCESSOR_ERROR`) leaves nothing half-written. The customer is created lazily, with an
 * idempotency key from the organization id, and its id stored once.
 */
export class BillingService {
  readonly #db: Knex;
  readonly #processor: PaymentProcessor | undefined;
  readonly #settings: BillingSettings;

  constructor(deps: { db: Knex; processor: PaymentProcessor | undefined; settings: BillingSettings }) {
    this.#db = deps.db;
    this.#processor = deps.processor;
    this.#settings = deps.settings;
  }

  config(): Schemas['BillingConfig'] {
    const on = this.#processor !== undefined;
    return {
      publishable_key: this.#settings.publishableKey ?? '',
      features: { postpaid: on, payment_methods: on, invoices: on, customer_portal: on, enforcement: this.#settings.enforcement },
    };
  }

  /** The account; the processor's customer and subscription ids only for admins (null for members and viewers). */
  async account(principal: SessionPrincipal): Promise<Schemas['BillingAccount']> {
    const account = toBillingAccount(await this.#accountOf(principal));
    if (roleAtLeast(principal.role, 'admin')) return account;
    return { ...account, processor_customer_id: null, processor_subscription_id: null };
  }

  async usage(principal: SessionPrincipal): Promise<UsageSummary> {
    return usageSummary(this.#db, requireOrganization(principal).id);
  }

  /** The period's usage export, open: the caller writes its rows and closes it (usage-export.ts). */
  async exportUsage(principal: SessionPrincipal, request: { period: string; groupBy: UsageExportGroupBy }): Promise<UsageExport> {
    return openUsageExport(this.#db, requireOrganization(principal).id, request);
  }

  async subscription(principal: SessionPrincipal): Promise<Schemas['Subscription']> {
    return toSubscription(requireSubscription(await this.#accountOf(principal)));
  }

  /** Makes the card the default and creates the metered subscription unless a live one exists. */
  async activatePostpaid(principal: SessionPrincipal, paymentMethodId: string): Promise<Schemas['Subscription']> {
    const processor = this.#requireProcessor();
    const account = await this.#accountOf(principal);
    const card = await this.#ownCard(account, paymentMethodId, 'body/processor_payment_method_id', 'VALIDATION_FAILED');
    const subscription = await activate(processor, account, card.id, await installationId(this.#db));
    await this.#db.transaction(async (trx) => {
      await lockAccount(trx, account.id);
      await recordDefaultPaymentMethod(trx, account.id, card.id);
      await recordSubscription(trx, account.id, subscription, principal.user.id);
    });
    return toSubscription(requireSubscription(await this.#accountOf(principal)));
  }

  async setCollectionMethod(principal: SessionPrincipal, method: CollectionMethod): Promise<Schemas['Subscription']> {
    const processor = this.#requireProcessor();
    const account = requireSubscription(await this.#accountOf(principal));
    if (account.collection_method === method) return toSubscription(account);
    if (method === 'charge_automatically') {
      const customer = await processor.getCustomer(account.processor_customer_id ?? '');
      if (!customer.defaultPaymentMethodId) {
        throw new AppError('PAYMENT_SETUP_INCOMPLETE', 'Your organization has no default card to charge; save one first.');
      }
    }
    const subscription = await processor.setCollectionMethod(account.processor_subscription_id, method);
    await recordSubscription(this.#db, account.id, subscription, method === 'charge_automatically' ? principal.user.id : undefined);
    return toSubscription(requireSubscription(await this.#accountOf(principal)));
  }

  async paymentMethods(principal: SessionPrincipal): Promise<Schemas['PaymentMethod'][]> {
    const account = await this.#accountOf(principal);
    if (!account.processor_customer_id || !this.#processor) return [];
    return this.#cardsOf(this.#processor, account.processor_customer_id);
  }

  async setDefaultPaymentMethod(principal: SessionPrincipal, paymentMethodId: string): Promise<Schemas['PaymentMethod'][]> {
    const processor = this.#requireProcessor();
    const account = await this.#accountOf(principal);
    const card = await this.#ownCard(account, paymentMethodId, 'body/processor_default_payment_method_id', 'NOT_FOUND');
    const customer = await processor.setDefaultPaymentMethod(account.processor_customer_id ?? '', card.id);
    await recordDefaultPaymentMethod(this.#db, account.id, customer.defaultPaymentMethodId);
    return this.#cardsOf(processor, customer.id);
  }

  async detachPaymentMethod(principal: SessionPrincipal, paymentMethodId: string): Promise<void> {
    const processor = this.#requireProcessor();
    const account = await this.#accountOf(principal);
    const card = await this.#ownCard(account, paymentMethodId, 'path/payment_method_id', 'NOT_FOUND');
    await processor.detachPaymentMethod(card.id);
    const customer = await processor.getCustomer(account.processor_customer_id ?? '');
    await recordDefaultPaymentMethod(this.#db, account.id, customer.defaultPaymentMethodId);
  }

  async portalSession(principal: SessionPrincipal, returnUrl: string | undefined): Promise<Schemas['BillingPortalSession']> {
    const processor = this.#requireProcessor();
    const back = this.#returnUrl(returnUrl);
    const customerId = await this.#ensureCustomer(processor, principal);
    return processor.createPortalSession({ customerId, returnUrl: back });
  }

  async checkoutSetupSession(principal: SessionPrincipal, purpose: CheckoutPurpose, returnUrl: string | undefined): Promise<Schemas['CheckoutSession']> {
    const processor = this.#requireProcessor();
    const back = this.#returnUrl(returnUrl);
    const customerId = await this.#ensureCustomer(processor, principal);
    const organization = requireOrganization(principal);
    const session = await processor.createSetupCheckoutSession({
      // One session per request: the key only guards the SDK's own retries of this call.
      key: `${await installationId(this.#db)}-${randomUUID()}`,
      customerId,
      currency: 'usd',
      ui: 'embedded',
      returnUrl: back,
      metadata: { purpose, organization_id: String(organization.id), user_id: String(principal.user.id) },
    });
    return {
      checkout_session_id: session.id,
      client_secret: session.clientSecret ?? '',
      mode: session.mode,
      status: session.status,
      payment_status: session.paymentStatus,
      expires_at: session.expiresAt.toISOString(),
    };
  }

  async invoices(principal: SessionPrincipal): Promise<Schemas['Invoice'][]> {
    const account = await this.#accountOf(principal);
    return (await listInvoicesOf(this.#db, account.id)).map(toInvoice);
  }

  async #accountOf(principal: SessionPrincipal): Promise<BillingAccountRow> {
    const account = await findBillingAccount(this.#db, requireOrganization(principal).id);
    if (!account) throw new AppError('NOT_FOUND', 'Your organization has no billing account.');
    return account;
  }

  #requireProcessor(): PaymentProcessor {
    return requireProcessor(this.#processor);
  }

  /** The organization's customer id, creating the customer once (same key, same customer) and storing its id. */
  async #ensureCustomer(processor: PaymentProcessor, principal: SessionPrincipal): Promise<string> {
    const account = await this.#accountOf(principal);
    if (account.processor_customer_id) return account.processor_customer_id;
    const organization = requireOrganization(principal);
    const key = `${await installationId(this.#db)}-${account.processor_key}`;
    const customer = await processor.ensureCustomer({ key, organizationId: organization.id, name: organization.name, email: principal.user.email });
    await recordCustomer(this.#db, account.id, customer.id);
    return (await this.#accountOf(principal)).processor_customer_id ?? customer.id;
  }

  /** A card attached to the organization's customer, or the error the route documents for any other. */
  async #ownCard(account: BillingAccountRow, paymentMethodId: string, location: string, code: 'VALIDATION_FAILED' | 'NOT_FOUND'): Promise<ProcessorPaymentMethod> {
    const processor = this.#requireProcessor();
    const notOurs = () =>
      code === 'NOT_FOUND'
        ? new AppError('NOT_FOUND', 'No such card is saved for your organization.')
        : new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', { errors: [{ location, message: 'is not a card saved for your organization' }] });
    if (!account.processor_customer_id) throw notOurs();
    const card = await processor.getPaymentMethod(paymentMethodId).catch((error: unknown) => {
      if (error instanceof PaymentProcessorError && error.processorStatus === 404) throw notOurs();
      throw error;
    });
    if (card.customerId !== account.processor_customer_id) throw notOurs();
    return card;
  }

  async #cardsOf(processor: PaymentProcessor, customerId: string): Promise<Schemas['PaymentMethod'][]> {
    const [cards, customer] = await Promise.all([processor.listPaymentMethods(customerId), processor.getCustomer(customerId)]);
    // The processor lists newest first; the default goes first.
    const ordered = [...cards.filter((card) => card.id === customer.defaultPaymentMethodId), ...cards.filter((card) => card.id !== customer.defaultPaymentMethodId)];
    return ordered.map((card) => ({
      id: card.id,
      brand: card.brand,
      last4: card.last4,
      exp_month: card.expMonth,
      exp_year: card.expYear,
      is_default: card.id === customer.defaultPaymentMethodId,
      allow_redisplay: card.allowRedisplay,
    }));
  }

  #returnUrl(returnUrl: string | undefined): string {
    if (returnUrl === undefined) return this.#settings.billingPageUrl;
    if (!URL.canParse(returnUrl)) {
      throw new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', { errors: [{ location: 'body/return_url', message: 'must be an absolute URL' }] });
    }
    if (!this.#settings.allowedOrigins.includes(new URL(returnUrl).origin)) {
      throw new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', { errors: [{ location: 'body/return_url', message: 'must be on an allowed origin' }] });
    }
    return returnUrl;
  }
}

/**
 * Makes the card the customer's default and returns its live subscription, creating one on the
 * meters' prices when it has none (the key follows the subscription it replaces, so a retry
 * creates no second one).
 */
export async function activate(processor: PaymentProcessor, account: BillingAccountRow, paymentMethodId: string, installation: string): Promise<ProcessorSubscription> {
  const customerId = account.processor_customer_id ?? '';
  await processor.setDefaultPaymentMethod(customerId, paymentMethodId);
  if (account.processor_subscription_id) {
    const current = await processor.getSubscription(account.processor_subscription_id);
    if (!ENDED_SUBSCRIPTION.has(current.status)) return current;
  }
  const prices = await processor.ensureMeterPrices(METER_PRICES);
  return processor.createSubscription({
    key: `${installation}-${account.processor_key}-after-${account.processor_subscription_id ?? 'none'}`,
    customerId,
    priceIds: prices.map((price) => price.priceId),
    defaultPaymentMethodId: paymentMethodId,
    metadata: { billing_account_id: String(account.id), organization_id: String(account.organization_id) },
  });
}

type SubscribedAccount = BillingAccountRow & { processor_subscription_id: string; subscription_status: string; current_period_start: Date; current_period_end: Date };

function requireSubscription(account: BillingAccountRow): SubscribedAccount {
  if (!account.processor_subscription_id || !account.subscription_status || !account.current_period_start || !account.current_period_end) {
    throw new AppError('NOT_FOUND', 'Postpaid billing was never activated for your organization.');
  }
  return account as SubscribedAccount;
}

const iso = (value: Date | null) => (value ? value.toISOString() : null);

function toBillingAccount(row: BillingAccountRow): Schemas['BillingAccount'] {
  return {
    id: row.id,
    organization_id: row.organization_id,
    account_type: row.account_type,
    currency: row.currency,
    billing_mode: row.billing_mode,
    status: row.status,
    processor_customer_id: row.processor_customer_id,
    processor_subscription_id: row.processor_subscription_id,
    subscription_status: row.subscription_status,
    collection_method: row.collection_method,
    current_period_start: iso(row.current_period_start),
    current_period_end: iso(row.current_period_end),
    auto_charge_enabled_at: iso(row.auto_charge_enabled_at),
    auto_charge_enabled_by_user_id: row.auto_charge_enabled_by_user_id,
    max_active_resources: row.max_active_resources,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

function toSubscription(row: SubscribedAccount): Schemas['Subscription'] {
  return {
    billing_account_id: row.id,
    subscription_status: row.subscription_status,
    collection_method: row.collection_method,
    current_period_start: row.current_period_start.toISOString(),
    current_period_end: row.current_period_end.toISOString(),
  };
}

function toInvoice(row: InvoiceRow): Schemas['Invoice'] {
  return {
    processor_invoice_id: row.processor_invoice_id,
    status: row.status,
    collection_method: row.collection_method,
    amount_due: Number(row.amount_due),
    amount_paid: Number(row.amount_paid),
    currency: row.currency,
    hosted_invoice_url: row.hosted_invoice_url,
    invoice_pdf: row.invoice_pdf,
    due_date: iso(row.due_date),
    period_start: row.period_start.toISOString(),
    period_end: row.period_end.toISOString(),
    created: row.created.toISOString(),
    number: row.number,
    subtotal: nullableNumber(row.subtotal),
    tax: nullableNumber(row.tax),
    total: nullableNumber(row.total),
    lines: row.lines,
  };
}

/** A bigint column (a string from Postgres) as a number; null stays null. */
const nullableNumber = (value: string | number | null): number | null => (value === null ? null : Number(value));
