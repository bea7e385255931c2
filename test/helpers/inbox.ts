import { simpleParser, type ParsedMail } from 'mailparser';
import { SMTPServer } from 'smtp-server';

export interface ReceivedEmail {
  to: string;
  subject: string;
  text: string;
  html: string;
}

/** Which emails `next` takes: those whose subject contains `subject` (a string) or matches it. */
export interface EmailFilter {
  subject?: string | RegExp;
  timeoutMs?: number;
}

/**
 * A real SMTP server on loopback that keeps what it receives, standing in for the mail provider.
 * `next(to)` resolves with the next email to that address (already received or still to come);
 * `next(to, { subject })` with the next one of that kind, leaving the others (a registration's
 * verification email, say) in the inbox.
 */
export class Inbox {
  readonly #server: SMTPServer;
  readonly #received: ReceivedEmail[] = [];
  readonly #waiting: Array<{ to: string; matches: (email: ReceivedEmail) => boolean; resolve: (email: ReceivedEmail) => void }> = [];
  #port = 0;
  /** When set, the server refuses every message (to test delivery failures). */
  refuse = false;

  constructor() {
    this.#server = new SMTPServer({
      authOptional: true,
      disabledCommands: ['STARTTLS'],
      logger: false,
      onData: (stream, _session, callback) => {
        if (this.refuse) {
          stream.resume();
          stream.on('end', () => callback(Object.assign(new Error('Mailbox unavailable'), { responseCode: 550 })));
          return;
        }
        simpleParser(stream)
          .then((mail) => {
            this.#deliver(mail);
            callback();
          })
          .catch(callback);
      },
    });
  }

  get url(): string {
    return `smtp://127.0.0.1:${this.#port}`;
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    const address = this.#server.server.address();
    this.#port = typeof address === 'object' && address ? address.port : 0;
    return this;
  }

  all(to?: string): ReceivedEmail[] {
    return this.#received.filter((email) => !to || email.to === to.toLowerCase());
  }

  next(to: string, filter: EmailFilter = {}): Promise<ReceivedEmail> {
    const { subject, timeoutMs = 15_000 } = filter;
    const address = to.toLowerCase();
    const matches = (email: ReceivedEmail) =>
      subject === undefined || (typeof subject === 'string' ? email.subject.includes(subject) : subject.test(email.subject));
    const index = this.#received.findIndex((email) => email.to === address && matches(email));
    if (index >= 0) return Promise.resolve(this.#received.splice(index, 1)[0] as ReceivedEmail);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`No email to ${to}${subject ? ` about ${subject}` : ''} within ${timeoutMs} ms`)), timeoutMs);
      this.#waiting.push({
        to: address,
        matches,
        resolve: (email) => {
          clearTimeout(timer);
          resolve(email);
        },
      });
    });
  }

  stop(): Promise<void> {
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }

  #deliver(mail: ParsedMail): void {
    const recipients = [mail.to].flat().flatMap((group) => group?.value ?? []).map((entry) => entry.address?.toLowerCase() ?? '');
    for (const to of recipients) {
      const email = { to, subject: mail.subject ?? '', text: mail.text ?? '', html: typeof mail.html === 'string' ? mail.html : '' };
      const waiter = this.#waiting.findIndex((w) => w.to === to && w.matches(email));
      if (waiter >= 0) this.#waiting.splice(waiter, 1)[0]?.resolve(email);
      else this.#received.push(email);
    }
  }
}
