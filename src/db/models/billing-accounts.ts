import { BaseModel } from '../base-model.ts';

/** `billing_accounts`: one per organization; the payment columns come with the billing work. */
export class BillingAccountRow extends BaseModel {
  static override tableName = 'billing_accounts';
  declare id: number;
  declare organization_id: number;
  declare account_type: string;
  declare currency: string;
  declare billing_mode: string;
  declare status: string;
  declare processor_customer_id: string | null;
  declare processor_subscription_id: string | null;
  declare subscription_status: string | null;
  declare collection_method: 'charge_automatically' | 'send_invoice';
  declare current_period_start: Date | null;
  declare current_period_end: Date | null;
  declare auto_charge_enabled_at: Date | null;
  declare auto_charge_enabled_by_user_id: number | null;
  /** Active deployments the organization may have at once. */
  declare max_active_resources: number;
  declare created_at: Date;
  declare updated_at: Date;
}
