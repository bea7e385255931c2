import { BaseModel } from '../base-model.ts';

/** `billing_accounts`: one per organization, with the payment processor's state as last read. */
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
  /** The customer's default payment method at the processor (`invoice_settings.default_payment_method`). */
  declare default_payment_method_id: string | null;
  /** USD per billing period, a decimal string as Postgres numeric reads; null for no limit. */
  declare monthly_spending_limit: string | null;
  declare processor_synced_at: Date | null;
  /** Active deployments the organization may have at once. */
  declare max_active_resources: number;
  /** Random, the account's part of its customer's and subscriptions' idempotency keys at the processor. */
  declare processor_key: string;
  declare created_at: Date;
  declare updated_at: Date;
}
