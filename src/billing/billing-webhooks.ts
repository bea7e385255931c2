import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { PgBoss } from 'pg-boss';
import { AppError } from '../errors.ts';
import { enqueue, type JobDefinition } from '../jobs/queue.ts';
import { activate } from './billing.service.ts';
import { installationId } from './installation.ts';
import { requireProcessor, WebhookSignatureError, type PaymentProcessor, type ProcessorCheckoutSession, type ProcessorEvent } from './payment-processor.ts';
import {
  findAccountByCustomer,
  findWebhookEvent,
  insertWebhookEvent,
  lockAccount,
  markWebhookEventProcessed,
  recordDefaultPaymentMethod,
  recordSubscription,
  upsertInvoice,
} from './processor-state.repository.ts';
import { recordMeterError } from './usage-reports.repository.ts';

export const BILLING_EVENT_QUEUE = 'billing-event';

/**
 * The processor's webhooks (interface: `POST /v1/billing/webhook`; DESIGN.md §3 Billing). The route
 * verifies the signature on the raw body, stores the event id once and queues a job in the same
 * transaction, and answers at once; a replayed id is acknowledged and does nothing. The job re-reads
 * the event's object from the processor and writes its current state, so events in any order, late
 * or repeated, leave the state the processor has.
 */
export class BillingWebhooks {
  readonly #db: Knex;
  readonly #boss: PgBoss;
  readonly #processor: PaymentProcessor | undefined;

  constructor(deps: { db: Knex; boss: PgBoss; processor: PaymentProcessor | undefined }) {
    this.#db = deps.db;
    this.#boss = deps.boss;
    this.#processor = deps.processor;
  }

  /** Verifies and stores one delivery; true when it is new. */
  async receive(rawBody: Buffer | undefined, signature: string | undefined): Promise<boolean> {
    return this.#store(() => requireProcessor(this.#processor).verifyWebhook(rawBody ?? '', signature));
  }

  /**
   * Verifies and stores one thin event of the event destination (`POST
   * /v1/billing/event-notifications`): its id, type and related object; the job fetches the event.
   */
  async receiveNotification(rawBody: Buffer | undefined, signature: string | undefined): Promise<boolean> {
    return this.#store(() => requireProcessor(this.#processor).verifyEventNotification(rawBody ?? '', signature));
  }

  async #store(verify: () => ProcessorEvent): Promise<boolean> {
    let event: ProcessorEvent;
    try {
      event = verify();
    } catch (error) {
      if (error instanceof WebhookSignatureError) throw new AppError('INVALID_SIGNATURE', 'The Stripe-Signature header does not verify against the body, or it is too old.', { cause: error });
      throw error;
    }
    return this.#db.transaction(async (trx) => {
      const stored = await insertWebhookEvent(trx, event);
      if (stored) await enqueue(this.#boss, trx, BILLING_EVENT_QUEUE, { eventId: event.id }, { singletonKey: event.id });
      return stored;
    });
  }

  /**
   * The job: re-reads the event's object and writes the processor's current state. An invoice or a
   * subscription is written only to the account of the customer it belongs to at the processor: an
   * event (however well signed) naming another customer moves nothing between organizations.
   */
  async process(eventId: string, log?: Logger): Promise<void> {
    const processor = this.#processor;
    const event = await findWebhookEvent(this.#db, eventId);
    if (!processor || !event || event.processed_at) return;
    if (event.type === METER_ERROR_EVENT) {
      await this.#recordMeterErrors(processor, eventId, log);
      await markWebhookEventProcessed(this.#db, eventId);
      return;
    }
    const session = event.object_type === 'checkout.session' ? await processor.getCheckoutSession(event.object_id) : undefined;
    const customerId = session?.customerId ?? event.customer_id;
    const account = customerId ? await findAccountByCustomer(this.#db, customerId) : undefined;
    if (customerId && account) {
      await this.#db.transaction(async (trx) => {
        // One event of an account at a time: each writes what it read under the lock.
        const locked = await lockAccount(trx, account.id);
        if (session?.status === 'complete') await completeCheckout(trx, processor, locked, session, await installationId(this.#db));
        const notTheirs = (kind: string, owner: string) =>
          log?.warn({ event_id: eventId, object_id: event.object_id, event_customer: customerId, object_customer: owner }, `a billing event names another customer than its ${kind}'s; ignored`);
        if (event.object_type === 'invoice') {
          const invoice = await processor.getInvoice(event.object_id);
          if (invoice.customerId === customerId) await upsertInvoice(trx, locked.id, invoice);
          else notTheirs('invoice', invoice.customerId);
        }
        if (event.object_type === 'subscription') {
          const subscription = await processor.getSubscription(event.object_id);
          // A former subscription's late events do not replace the current one.
          if (subscription.customerId !== customerId) notTheirs('subscription', subscription.customerId);
          else if (!locked.processor_subscription_id || locked.processor_subscription_id === subscription.id) await recordSubscription(trx, locked.id, subscription);
        }
        const customer = await processor.getCustomer(customerId);
        await recordDefaultPaymentMethod(trx, locked.id, customer.defaultPaymentMethodId);
      });
    }
    await markWebhookEventProcessed(this.#db, eventId);
  }

  /**
   * A meter error report: each sample names a meter event by identifier, which is a usage report's
   * (the installation's prefix and a random id). The report keeps the error and its organization
   * gets an open `meter_error` anomaly (the usage summary's `open_anomalies`, an operator's `billing
   * reconcile`); the report stays marked sent, since sending it again would be refused the same
   * way. Stripe samples some events of each error type: the alert says how many there were in all.
   */
  async #recordMeterErrors(processor: PaymentProcessor, eventId: string, log?: Logger): Promise<void> {
    const report = await processor.getMeterErrorReport(eventId);
    let attributed = 0;
    for (const error of report.errors) {
      for (const sample of error.samples) {
        const detail = `${error.code}: ${sample.message}`.slice(0, 1000);
        const found = await recordMeterError(this.#db, sample.identifier, detail);
        if (found) attributed++;
      }
    }
    log?.error(
      { alert: 'meter_errors', event_id: eventId, meter_id: report.meterId, error_count: report.errorCount, attributed, codes: report.errors.map((error) => `${error.code}×${error.count}`) },
      'the payment processor refused meter events after accepting them (a meter error report)',
    );
  }
}

/** The thin event Stripe sends when meter events it accepted fail its asynchronous validation. */
export const METER_ERROR_EVENT = 'v1.billing.meter.error_report_triggered';

/**
 * A completed setup session: its card becomes the default when the customer has none, or always for
 * `postpaid_activation`, which then activates postpaid billing (once: `activate` keeps a live
 * subscription and creates with an idempotency key).
 */
async function completeCheckout(
  trx: Knex.Transaction,
  processor: PaymentProcessor,
  account: Awaited<ReturnType<typeof lockAccount>>,
  session: ProcessorCheckoutSession,
  installation: string,
): Promise<void> {
  const intent = session.setupIntentId ? await processor.getSetupIntent(session.setupIntentId) : undefined;
  const card = intent?.status === 'succeeded' ? intent.paymentMethodId : null;
  if (!card) return;
  if (session.metadata.purpose === 'postpaid_activation') {
    const subscription = await activate(processor, account, card, installation);
    const by = Number(session.metadata.user_id);
    await recordSubscription(trx, account.id, subscription, account.processor_subscription_id === subscription.id || !Number.isInteger(by) ? undefined : by);
    return;
  }
  const customer = await processor.getCustomer(session.customerId ?? '');
  if (!customer.defaultPaymentMethodId) await processor.setDefaultPaymentMethod(customer.id, card);
}

export function billingEventJob(webhooks: BillingWebhooks): JobDefinition<{ eventId: string }> {
  return {
    queue: BILLING_EVENT_QUEUE,
    retryLimit: 8,
    retryDelaySeconds: 2,
    concurrency: 4,
    handle: ({ eventId }, { log }) => webhooks.process(eventId, log),
  };
}
