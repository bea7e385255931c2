import { describe, expect, it } from 'vitest';
import { Mailer } from '../../src/adapters/mailer.ts';
import { startMailDev } from '../../dev/maildev.ts';
import { createLogger } from '../../src/logger.ts';
import { freePort, waitUntil } from '../helpers/net.ts';

describe('MailDev, the local inbox of make run', () => {
  it('starts, receives what the mailer sends, and shows it in its web inbox', async () => {
    const inbox = await startMailDev({ smtpPort: await freePort(), webPort: await freePort(), log: createLogger('silent') });
    const mailer = new Mailer(inbox.smtpUrl, 'Model Deployment <no-reply@example.com>');
    try {
      await mailer.send({ to: 'ada@example.com', subject: 'Reset your password', text: 'Choose a new password: https://app/x' });
      let emails: Array<{ subject: string; to: Array<{ address: string }> }> = [];
      await waitUntil(async () => {
        emails = (await (await fetch(`${inbox.webUrl}/api/email`)).json()) as typeof emails;
        return emails.length > 0;
      }, 'MailDev to list the email');
      expect(emails[0]).toMatchObject({ subject: 'Reset your password', to: [{ address: 'ada@example.com' }] });
    } finally {
      mailer.close();
      await inbox.stop();
    }
  });
});
