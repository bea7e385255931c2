import type { components } from '../../generated/api.d.ts';
import type { DeploymentEventRow } from '../db/models/deployment-events.ts';
import type { WebhookDeliveryRow, WebhookEndpointRow } from '../db/models/webhooks.ts';
import { toDeploymentEvent } from '../events/events.repository.ts';

export type WebhookEvent = components['schemas']['WebhookEvent'];
export type WebhookEndpoint = components['schemas']['WebhookEndpoint'];
export type WebhookDelivery = components['schemas']['WebhookDelivery'];

export const TEST_MESSAGE = 'A test event sent from the Model Deployment Service.';

/**
 * The body of a delivery, the same at every attempt: a deployment event's type, time and the event
 * itself; or, for a test, the endpoint it was sent to.
 */
export function payloadOf(delivery: Pick<WebhookDeliveryRow, 'endpoint_id' | 'event_type' | 'created_at'>, event: DeploymentEventRow | undefined): WebhookEvent {
  if (!event) {
    return { type: 'webhook.test', timestamp: delivery.created_at.toISOString(), data: { webhook_endpoint_id: delivery.endpoint_id, message: TEST_MESSAGE } };
  }
  return { type: event.type, timestamp: event.created_at.toISOString(), data: toDeploymentEvent(event) };
}

export function toWebhookEndpoint(row: WebhookEndpointRow): WebhookEndpoint {
  const previousValid = row.previous_secret_expires_at && row.previous_secret_expires_at.getTime() > Date.now();
  return {
    id: row.id,
    organization_id: row.organization_id,
    url: row.url,
    description: row.description,
    event_types: row.event_types,
    status: row.status,
    disabled_reason: row.disabled_reason,
    disabled_at: row.disabled_at?.toISOString() ?? null,
    consecutive_failures: row.consecutive_failures,
    previous_secret_expires_at: previousValid ? (row.previous_secret_expires_at as Date).toISOString() : null,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

export function toWebhookDelivery(row: WebhookDeliveryRow): WebhookDelivery {
  return {
    id: row.id,
    webhook_endpoint_id: row.endpoint_id,
    event_type: row.event_type,
    event_id: row.event_id === null ? null : Number(row.event_id),
    status: row.status,
    attempts: row.attempts,
    last_error: row.last_error,
    created_at: row.created_at.toISOString(),
    completed_at: row.completed_at?.toISOString() ?? null,
  };
}
