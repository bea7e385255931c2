import type { Knex } from 'knex';
import { BillingAccountRow } from '../db/models/billing-accounts.ts';
import { BillingWebhookEventRow } from '../db/models/billing-webhook-events.ts';
import { InvoiceRow, type InvoiceLine } from '../db/models/invoices.ts';
import type { PaymentProcessor, ProcessorEvent, ProcessorInvoice, ProcessorSubscription } from './payment-processor.ts';

/** The payment processor's state as the service keeps it: billing accounts' processor columns, invoices, webhook events. */
type Db = Knex | Knex.Transaction;

/** Stores the customer id once: a concurrent request that stored it first wins (the processor gave both the same customer). */
export async function recordCustomer(db: Db, accountId: number, customerId: string): Promise<void> {
  await BillingAccountRow.query(db).findById(accountId).whereNull('processor_customer_id').patch({ processor_customer_id: customerId });
}

export async function findAccountByCustomer(db: Db, customerId: string): Promise<BillingAccountRow | undefined> {
  return BillingAccountRow.query(db).findOne({ processor_customer_id: customerId });
}

export async function lockAccount(trx: Knex.Transaction, accountId: number): Promise<BillingAccountRow> {
  return BillingAccountRow.query(trx).findById(accountId).forUpdate().throwIfNotFound();
}

/** The subscription's current state into the account; who turned automatic charging on when it is turned on. */
export async function recordSubscription(db: Db, accountId: number, subscription: ProcessorSubscription, autoChargeBy?: number): Promise<void> {
  await BillingAccountRow.query(db)
    .findById(accountId)
    .patch({
      processor_subscription_id: subscription.id,
      subscription_status: subscription.status,
      collection_method: subscription.collectionMethod === 'send_invoice' ? 'send_invoice' : 'charge_automatically',
      current_period_start: subscription.currentPeriodStart,
      current_period_end: subscription.currentPeriodEnd,
      processor_synced_at: new Date(),
      ...(autoChargeBy === undefined ? {} : { auto_charge_enabled_at: new Date(), auto_charge_enabled_by_user_id: autoChargeBy }),
    });
}

export async function recordDefaultPaymentMethod(db: Db, accountId: number, paymentMethodId: string | null): Promise<void> {
  await BillingAccountRow.query(db).findById(accountId).patch({ default_payment_method_id: paymentMethodId, processor_synced_at: new Date() });
}

export async function upsertInvoice(db: Db, accountId: number, invoice: ProcessorInvoice): Promise<void> {
  await InvoiceRow.query(db)
    .insert({
      processor_invoice_id: invoice.id,
      billing_account_id: accountId,
      status: invoice.status,
      collection_method: invoice.collectionMethod === 'send_invoice' ? 'send_invoice' : 'charge_automatically',
      amount_due: invoice.amountDue,
      amount_paid: invoice.amountPaid,
      currency: invoice.currency,
      hosted_invoice_url: invoice.hostedInvoiceUrl,
      invoice_pdf: invoice.invoicePdf,
      due_date: invoice.dueDate,
      period_start: invoice.periodStart,
      period_end: invoice.periodEnd,
      created: invoice.created,
      number: invoice.number,
      subtotal: invoice.subtotal,
      tax: invoice.tax,
      total: invoice.total,
      lines: JSON.stringify(
        invoice.lines.map((line) => ({
          description: line.description,
          processor_price_id: line.priceId,
          quantity: line.quantity,
          amount: line.amount,
          period_start: line.periodStart.toISOString(),
          period_end: line.periodEnd.toISOString(),
        })),
      ) as unknown as InvoiceLine[],
      synced_at: new Date(),
    })
    .onConflict('processor_invoice_id')
    .merge();
}

/**
 * Backfills the account's invoices from the processor's list (every page), not only from webhooks:
 * each of its customer's invoices is written as the processor has it. The number written.
 */
export async function backfillInvoices(db: Db, processor: PaymentProcessor, account: { id: number; processor_customer_id: string }): Promise<number> {
  let written = 0;
  let startingAfter: string | undefined;
  for (;;) {
    const page = await processor.listInvoices(account.processor_customer_id, { limit: 100, startingAfter });
    for (const invoice of page.invoices) {
      if (invoice.customerId !== account.processor_customer_id) continue;
      await upsertInvoice(db, account.id, invoice);
      written++;
    }
    if (!page.hasMore || !page.invoices.length) return written;
    startingAfter = page.invoices.at(-1)?.id;
  }
}

/** The account's 100 most recent invoices, newest first. */
export async function listInvoicesOf(db: Db, accountId: number): Promise<InvoiceRow[]> {
  return InvoiceRow.query(db).where({ billing_account_id: accountId }).orderBy([{ column: 'created', order: 'desc' }, { column: 'processor_invoice_id', order: 'desc' }]).limit(100);
}

/** One of the account's invoices by the processor's id. */
export async function findInvoiceOf(db: Db, accountId: number, invoiceId: string): Promise<InvoiceRow | undefined> {
  return InvoiceRow.query(db).findOne({ billing_account_id: accountId, processor_invoice_id: invoiceId });
}

/** The account's latest invoice, not voided, billing exactly `[start, end)`. */
export async function findInvoiceOfPeriod(db: Db, accountId: number, period: { start: Date; end: Date }): Promise<InvoiceRow | undefined> {
  return InvoiceRow.query(db)
    .where({ billing_account_id: accountId, period_start: period.start, period_end: period.end })
    .whereNot({ status: 'void' })
    .orderBy([{ column: 'created', order: 'desc' }, { column: 'processor_invoice_id', order: 'desc' }])
    .first();
}

/** Stores a verified event; false when its id was stored before (a replay). */
export async function insertWebhookEvent(trx: Knex.Transaction, event: ProcessorEvent): Promise<boolean> {
  const inserted = await trx('billing_webhook_events')
    .insert({ id: event.id, type: event.type, object_type: event.objectType, object_id: event.objectId, customer_id: event.customerId })
    .onConflict('id')
    .ignore()
    .returning('id');
  return inserted.length === 1;
}

export async function findWebhookEvent(db: Db, id: string): Promise<BillingWebhookEventRow | undefined> {
  return BillingWebhookEventRow.query(db).findById(id);
}

export async function markWebhookEventProcessed(db: Db, id: string): Promise<void> {
  await BillingWebhookEventRow.query(db).findById(id).patch({ processed_at: new Date() });
}
