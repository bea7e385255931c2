import type { Handlers } from '../http/types.ts';
import type { WebhooksService } from './webhooks.service.ts';

type WebhookHandlers = Pick<
  Handlers,
  | 'listWebhookEndpoints'
  | 'createWebhookEndpoint'
  | 'getWebhookEndpoint'
  | 'updateWebhookEndpoint'
  | 'deleteWebhookEndpoint'
  | 'rotateWebhookSecret'
  | 'sendWebhookTestEvent'
  | 'listWebhookDeliveryAttempts'
>;

export function webhookHandlers(deps: { webhooks: WebhooksService }): WebhookHandlers {
  const { webhooks } = deps;
  return {
    listWebhookEndpoints: async (context) => ({ status: 200, body: await webhooks.list(context.auth) }),
    createWebhookEndpoint: async (context) => ({ status: 201, body: await webhooks.create(context.auth, context.body) }),
    getWebhookEndpoint: async (context) => ({ status: 200, body: await webhooks.get(context.auth, context.params.webhook_endpoint_id) }),
    updateWebhookEndpoint: async (context) => ({ status: 200, body: await webhooks.update(context.auth, context.params.webhook_endpoint_id, context.body) }),
    deleteWebhookEndpoint: async (context) => {
      await webhooks.delete(context.auth, context.params.webhook_endpoint_id);
      return { status: 204, body: undefined };
    },
    rotateWebhookSecret: async (context) => ({ status: 200, body: await webhooks.rotateSecret(context.auth, context.params.webhook_endpoint_id, context.body) }),
    sendWebhookTestEvent: async (context) => ({ status: 202, body: await webhooks.sendTest(context.auth, context.params.webhook_endpoint_id) }),
    listWebhookDeliveryAttempts: async (context) => ({
      status: 200,
      body: await webhooks.listAttempts(context.auth, context.params.webhook_endpoint_id, context.query),
    }),
  };
}
