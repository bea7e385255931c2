import type { Knex } from 'knex';
import type { PgBoss } from 'pg-boss';
import type { Mailer, OutgoingEmail } from '../adapters/mailer.ts';
import type { Keyring } from '../crypto.ts';
import { enqueue, type JobDefinition } from '../jobs/queue.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { findQueuedEmail, insertEmail, recordSendFailure, recordSent } from './email.repository.ts';

export const SEND_EMAIL_QUEUE = 'send-email';
const SEAL = 'email-body';

export interface QueuedEmail extends OutgoingEmail {
  /** What kind of email it is, e.g. `password_reset`; kept for the record. */
  template: string;
  /** The invitation the email belongs to, whose delivery status it reports. */
  invitationId?: number;
}

/**
 * The transactional email outbox. An email is a row (its body sealed with the server key, since it
 * may carry a link token) plus a job, written in the caller's transaction: it goes out only if that
 * transaction commits, and its delivery status is recorded on the row.
 */
export class EmailOutbox {
  readonly #boss: PgBoss;
  readonly #keyring: Keyring;

  constructor(boss: PgBoss, keyring: Keyring) {
    this.#boss = boss;
    this.#keyring = keyring;
  }

  async enqueue(trx: Knex.Transaction, email: QueuedEmail): Promise<number> {
    const body = this.#keyring.encrypt(SEAL, JSON.stringify({ text: email.text, html: email.html }));
    const id = await insertEmail(trx, {
      to_address: email.to,
      subject: email.subject,
      template: email.template,
      sealed_body: body,
      invitation_id: email.invitationId ?? null,
    });
    await enqueue(this.#boss, trx, SEND_EMAIL_QUEUE, { emailId: id });
    return id;
  }
}

/**
 * Sends one queued email; retried with backoff (doubling from EMAIL_RETRY_DELAY_SECONDS up to
 * EMAIL_RETRY_MAX_DELAY_SECONDS), so with the defaults an SMTP server down for about 6 hours
 * delays mail without losing it; recorded as `failed` after the last attempt. An email is sent
 * once: only a `queued` one is sent, and it is marked `sent` right after the server accepted it
 * (a crash between the two is the one window in which it can go out twice, as SMTP has no
 * idempotency key).
 */
export function sendEmailJob(deps: {
  db: Knex;
  keyring: Keyring;
  mailer: Mailer;
  retry: { limit: number; delaySeconds: number; maxDelaySeconds: number };
  metrics?: Metrics | undefined;
}): JobDefinition<{ emailId: number }> {
  return {
    queue: SEND_EMAIL_QUEUE,
    retryLimit: deps.retry.limit,
    retryDelaySeconds: deps.retry.delaySeconds,
    retryDelayMaxSeconds: deps.retry.maxDelaySeconds,
    concurrency: 4,
    async handle({ emailId }, { log, lastAttempt }) {
      const email = await findQueuedEmail(deps.db, emailId);
      if (!email?.sealed_body) return;
      const body = JSON.parse(deps.keyring.decrypt(SEAL, email.sealed_body)) as { text: string; html?: string };
      try {
        await deps.mailer.send({ to: email.to_address, subject: email.subject, ...body });
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        deps.metrics?.email(email.template, lastAttempt ? 'failed' : 'retrying');
        await recordSendFailure(deps.db, emailId, message.slice(0, 500), lastAttempt);
        log.warn({ email_id: emailId, template: email.template, err: message, last_attempt: lastAttempt }, 'email not sent');
        throw error;
      }
      deps.metrics?.email(email.template, 'sent');
      await recordSent(deps.db, emailId);
      log.info({ email_id: emailId, template: email.template }, 'email sent');
    },
  };
}
