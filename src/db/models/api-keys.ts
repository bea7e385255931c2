import type { components } from '../../../generated/api.d.ts';
import { BaseModel } from '../base-model.ts';

/** `api_keys`: an organization's keys, stored as the SHA-256 of the key; `key_prefix` is what the user sees. */
export class ApiKeyRow extends BaseModel {
  static override tableName = 'api_keys';
  declare id: number;
  declare organization_id: number;
  declare created_by_user_id: number | null;
  declare name: string;
  declare key_prefix: string;
  declare key_hash: string;
  declare status: components['schemas']['ApiKey']['status'];
  declare expires_at: Date | null;
  /** The key may call hosted models too (off by default). */
  declare allow_hosted_models: boolean;
  /** The key's own limits (null: the organization's default applies; see src/api-keys/key-limits.ts). */
  declare requests_per_minute: number | null;
  declare tokens_per_minute: number | null;
  /** bigint: read as a string, written as a number. */
  declare monthly_token_budget: string | number | null;
  /** numeric(12, 2) dollars, a decimal string. */
  declare monthly_spend_budget: string | null;
  declare last_used_at: Date | null;
  declare revoked_at: Date | null;
  declare created_at: Date;
  declare updated_at: Date;
}
