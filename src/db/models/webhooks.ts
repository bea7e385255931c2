import type { components } from '../../../generated/api.d.ts';
import { BaseModel } from '../base-model.ts';

/** `webhook_endpoints`: an organization's webhook receiver; its secrets sealed with the server key. */
export class WebhookEndpointRow extends BaseModel {
  static override tableName = 'webhook_endpoints';
  declare id: string;
  declare organization_id: number;
  declare url: string;
  declare description: string | null;
  /** The event types it receives; null: every type. */
  declare event_types: Array<components['schemas']['DeploymentEventType']> | null;
  declare status: components['schemas']['WebhookEndpointStatus'];
  declare disabled_reason: string | null;
  declare disabled_at: Date | null;
  declare sealed_secret: string;
  /** The secret before the last rotation, which still signs until `previous_secret_expires_at`. */
  declare previous_sealed_secret: string | null;
  declare previous_secret_expires_at: Date | null;
  /** Deliveries failed for good in a row (reset by any successful attempt). */
  declare consecutive_failures: number;
  declare created_by_user_id: number | null;
  declare created_at: Date;
  declare updated_at: Date;
}

/** `webhook_deliveries`: one message (its id is the `webhook-id`) of an event, or a test, to an endpoint. */
export class WebhookDeliveryRow extends BaseModel {
  static override tableName = 'webhook_deliveries';
  declare id: string;
  declare endpoint_id: string;
  /** bigint: read as a string; null for a test event. */
  declare event_id: string | null;
  declare event_type: components['schemas']['WebhookEventType'];
  declare status: components['schemas']['WebhookDeliveryStatus'];
  declare attempts: number;
  declare last_error: string | null;
  /** When its pg-boss job was created; null while the dispatcher has not queued it. */
  declare queued_at: Date | null;
  declare created_at: Date;
  declare completed_at: Date | null;
}

/** `webhook_delivery_attempts`: one try of a delivery. */
export class WebhookAttemptRow extends BaseModel {
  static override tableName = 'webhook_delivery_attempts';
  /** bigint: read as a string. */
  declare id: string;
  declare delivery_id: string;
  declare endpoint_id: string;
  declare attempt: number;
  declare outcome: 'succeeded' | 'failed';
  declare response_status: number | null;
  declare error: string | null;
  declare duration_ms: number;
  declare created_at: Date;
}
