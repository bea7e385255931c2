import type { Handlers } from '../http/types.ts';
import type { BillingWebhooks } from './billing-webhooks.ts';
import type { BillingService } from './billing.service.ts';

type BillingHandlers = Pick<
  Handlers,
  | 'getBillingConfig'
  | 'getBillingAccount'
  | 'getUsageSummary'
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
