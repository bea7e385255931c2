import type { components } from '../../../generated/api.d.ts';
import { BaseModel } from '../base-model.ts';

export type InvitationStatus = components['schemas']['Invitation']['status'];

/**
 * `invitations`: the stored status; a `pending` one past `expires_at` reads as `expired` (the rule
 * of `src/invitations/invitation-status.ts`) until the scheduled job records it so.
 */
export class InvitationRow extends BaseModel {
  static override tableName = 'invitations';
  declare id: number;
  declare organization_id: number;
  declare invitee_email: string;
  declare invitee_user_id: number | null;
  declare invited_by_user_id: number;
  declare role: components['schemas']['Invitation']['role'];
  declare status: InvitationStatus;
  declare token_hash: string;
  declare expires_at: Date;
  declare responded_at: Date | null;
  declare created_at: Date;
  declare updated_at: Date;
}
