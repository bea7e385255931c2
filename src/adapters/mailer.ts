import nodemailer, { type Transporter } from 'nodemailer';

export interface OutgoingEmail {
  to: string;
  subject: string;
  text: string;
  html?: string;
}

/** Sends email over SMTP (`SMTP_URL`): a real provider in production, MailDev or a test listener locally. */
export class Mailer {
  readonly #transport: Transporter;
  readonly #from: string;

  constructor(smtpUrl: string, from: string) {
    this.#transport = nodemailer.createTransport(smtpUrl);
    this.#from = from;
  }

  async send(email: OutgoingEmail): Promise<string> {
    const info = await this.#transport.sendMail({ from: this.#from, ...email });
    return info.messageId;
  }

  close(): void {
    this.#transport.close();
  }
}
