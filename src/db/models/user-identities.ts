import { BaseModel } from '../base-model.ts';

/** `user_identities`: a user's subject at an SSO provider (one per provider and subject, one per user and provider). */
export class UserIdentityRow extends BaseModel {
  static override tableName = 'user_identities';
  declare id: number;
  declare user_id: number;
  declare provider: string;
  declare subject: string;
  /** The verified email the provider last asserted for the subject. */
  declare email: string;
  declare created_at: Date;
}
