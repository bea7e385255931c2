import { BaseModel } from '../base-model.ts';

/** `users`: an account; `email` is unique case-insensitively (`users_email_unique` on `lower(email)`). */
export class UserRow extends BaseModel {
  static override tableName = 'users';
  declare id: number;
  declare email: string;
  /** Null for an account that signs in only with SSO. */
  declare password_hash: string | null;
  declare name: string;
  declare first_name: string | null;
  declare last_name: string | null;
  declare country: string | null;
  declare contact_number: string | null;
  /** The organization the user last used; a new session starts there. */
  declare current_organization_id: number | null;
  /** When the user first proved they own `email`; null until then. */
  declare email_verified_at: Date | null;
  declare created_at: Date;
  declare updated_at: Date;
}
