import type { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Logger } from 'pino';
import type { Handlers } from '../http/types.ts';
import type { BillingWebhooks } from './billing-webhooks.ts';
import type { BillingService } from './billing.service.ts';
import { csvChunks, jsonChunks, type UsageExport, type UsageExportFormat } from './usage-export.ts';
import { STREAMED } from '../http/operation-call.ts';


type BillingHandlers = Pick<
  Handlers,
  | 'getBillingConfig'
  | 'getBillingAccount'
  | 'getUsageSummary'
  | 'exportUsage'
  | 'getSubscription'
  | 'activatePostpaidSubscription'
  | 'updateCollectionMethod'
  | 'listPaymentMethods'
  | 'setDefaultPaymentMethod'
  | 'detachPaymentMethod'
  | 'createBillingPortalSession'
  | 'createCheckoutSetupSession'
  | 'listInvoices'
  | 'handleBillingWebhook'
  | 'handleBillingEventNotification'
>;

export function billingHandlers(deps: { billing: BillingService; billingWebhooks: BillingWebhooks }): BillingHandlers {
  const { billing, billingWebhooks } = deps;
  return {
    getBillingConfig: () => ({ status: 200, body: billing.config() }),
    getBillingAccount: async (context) => ({ status: 200, body: await billing.account(context.auth) }),
    getUsageSummary: async (context) => ({ status: 200, body: await billing.usage(context.auth) }),
    exportUsage: async (context) => {
      const { period = 'current', group_by: groupBy = 'service_key', format } = context.query;
      const exported = await billing.exportUsage(context.auth, { period, groupBy });
      // Without `format`, the Accept header chooses: CSV when it prefers text/csv, JSON otherwise.
      const chosen: UsageExportFormat = format ?? (context.req.accepts(['application/json', 'text/csv']) === 'text/csv' ? 'csv' : 'json');
      await streamExport(context.res, exported, chosen, context.auth.organization?.id ?? 0, context.log);
      return STREAMED;
    },
    getSubscription: async (context) => ({ status: 200, body: await billing.subscription(context.auth) }),
    activatePostpaidSubscription: async (context) => ({
      status: 200,
      body: await billing.activatePostpaid(context.auth, context.body.processor_payment_method_id),
    }),
    updateCollectionMethod: async (context) => ({ status: 200, body: await billing.setCollectionMethod(context.auth, context.body.collection_method) }),
    listPaymentMethods: async (context) => ({ status: 200, body: await billing.paymentMethods(context.auth) }),
    setDefaultPaymentMethod: async (context) => ({
      status: 200,
      body: await billing.setDefaultPaymentMethod(context.auth, context.body.processor_default_payment_method_id),
    }),
    detachPaymentMethod: async (context) => {
      await billing.detachPaymentMethod(context.auth, context.params.payment_method_id);
      return { status: 204, body: undefined };
    },
    createBillingPortalSession: async (context) => ({ status: 200, body: await billing.portalSession(context.auth, context.body?.return_url) }),
    createCheckoutSetupSession: async (context) => ({
      status: 201,
      body: await billing.checkoutSetupSession(context.auth, context.body.purpose, context.body.return_url),
    }),
    listInvoices: async (context) => ({ status: 200, body: await billing.invoices(context.auth) }),
    handleBillingWebhook: async (context) => {
      const signature = context.headers['stripe-signature'];
      await billingWebhooks.receive(context.req.rawBody, Array.isArray(signature) ? signature[0] : signature);
      return { status: 200, body: { received: true } };
    },
    handleBillingEventNotification: async (context) => {
      const signature = context.headers['stripe-signature'];
      await billingWebhooks.receiveNotification(context.req.rawBody, Array.isArray(signature) ? signature[0] : signature);
      return { status: 200, body: { received: true } };
    },
  };
}

/**
 * Writes the export as it is read, at the pace the client takes it (the pipeline waits for the
 * socket to drain before asking for the next batch), and ends its snapshot however it ends. A
 * failure after the headers went out destroys the connection: the client sees a truncated answer,
 * never a complete-looking one.
 */
async function streamExport(res: ServerResponse, exported: UsageExport, format: UsageExportFormat, organizationId: number, log: Logger): Promise<void> {
  res.statusCode = 200;
  if (format === 'csv') {
    res.setHeader('Content-Type', 'text/csv; charset=utf-8');
    const { group_by: groupBy, period } = exported.head;
    res.setHeader('Content-Disposition', `attachment; filename="usage-${organizationId}-${period.start.slice(0, 10)}-${groupBy}.csv"`);
  } else {
    res.setHeader('Content-Type', 'application/json; charset=utf-8');
  }
  try {
    await pipeline(Readable.from(format === 'csv' ? csvChunks(exported) : jsonChunks(exported)), res);
  } catch (error) {
    log.warn({ err: error }, 'usage export ended early');
  } finally {
    await exported.close();
  }
}
