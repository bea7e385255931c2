import type { components } from '../../../generated/api.d.ts';
import { BaseModel } from '../base-model.ts';

/** `memberships`: a user's role in an organization (one per pair). */
export class MembershipRow extends BaseModel {
  static override tableName = 'memberships';
  declare id: number;
  declare organization_id: number;
  declare user_id: number;
  declare role: components['schemas']['Role'];
  declare created_at: Date;
}
