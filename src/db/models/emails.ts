import { BaseModel } from '../base-model.ts';

/** `emails`: the transactional outbox; the body is sealed while queued and erased once sent or failed. */
export class EmailRow extends BaseModel {
  static override tableName = 'emails';
  declare id: number;
  declare to_address: string;
  declare subject: string;
  /** What kind of email it is, e.g. `password_reset`. */
  declare template: string;
  declare sealed_body: string | null;
  declare status: 'queued' | 'sent' | 'failed';
  declare attempts: number;
  declare last_error: string | null;
  declare sent_at: Date | null;
  /** The invitation whose delivery status this email reports. */
  declare invitation_id: number | null;
  declare created_at: Date;
  declare updated_at: Date;
}
