import { BaseModel } from '../base-model.ts';

/** `billing_webhook_events`: each verified processor event once, until its job has re-read its object. */
export class BillingWebhookEventRow extends BaseModel {
  static override tableName = 'billing_webhook_events';
  declare id: string;
  declare type: string;
  declare object_type: string;
  declare object_id: string;
  declare customer_id: string | null;
  declare received_at: Date;
  declare processed_at: Date | null;
}
