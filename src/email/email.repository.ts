import type { Knex } from 'knex';
import { EmailRow } from '../db/models/emails.ts';

/** Every query of the email outbox. */
type Db = Knex | Knex.Transaction;

export async function insertEmail(
  db: Db,
  email: Pick<EmailRow, 'to_address' | 'subject' | 'template' | 'sealed_body' | 'invitation_id'>,
): Promise<number> {
  const { id } = await EmailRow.query(db).insert(email);
  return id;
}

/** The email if it is still queued. */
export async function findQueuedEmail(db: Db, emailId: number): Promise<EmailRow | undefined> {
  return EmailRow.query(db).findById(emailId).where({ status: 'queued' });
}

/** Counts a failed attempt; the last one records the email as failed and erases its body. */
export async function recordSendFailure(db: Db, emailId: number, error: string, lastAttempt: boolean): Promise<void> {
  await EmailRow.query(db)
    .findById(emailId)
    .patch({ attempts: db.raw('attempts + 1'), last_error: error, ...(lastAttempt ? { status: 'failed', sealed_body: null } : {}) });
}

/** Records the email as sent and erases its body. */
export async function recordSent(db: Db, emailId: number): Promise<void> {
  await EmailRow.query(db)
    .findById(emailId)
    .patch({ status: 'sent', sent_at: db.fn.now(), attempts: db.raw('attempts + 1'), last_error: null, sealed_body: null });
}
