import { BaseModel } from '../base-model.ts';

/** `sessions`: server-side sessions; `id` is the SHA-256 of the cookie token, `public_id` what the user sees. */
export class SessionRow extends BaseModel {
  static override tableName = 'sessions';
  declare id: string;
  declare public_id: string;
  declare user_id: number;
  declare organization_id: number | null;
  /** `password` or the SSO provider's name. */
  declare auth_method: string;
  declare expires_at: Date;
  declare created_at: Date;
}
