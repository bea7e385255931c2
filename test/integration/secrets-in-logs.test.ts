import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKey } from '../factories/api-keys.ts';
import { PASSWORD, SUBJECTS, verificationToken, unverifiedUser } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import { invite } from '../factories/organizations.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser } from '../helpers/browser.ts';
import { inferenceClient } from '../helpers/inference-client.ts';

/**
 * Secrets never reach the logs (ASVS 5.0 16.2.5): the service logs at debug, into memory, while a
 * test makes every kind of secret it has and uses each once: a password, a session token and its
 * CSRF token, an email verification token, a password reset token, an invitation token, an API key,
 * a cluster's credentials (admin password and inference API key), and a webhook signing secret. Then every line is searched
 * for every secret.
 */
const lines: string[] = [];
let app: TestApp;
const secrets = new Map<string, string>();

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING, WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' }, { workers: true, cluster: { modelLoadMs: 20 }, logLines: lines });
}, 120_000);
afterAll(() => app?.close());

describe('secrets in the logs', () => {
  it('never logs a password, a token, a key or a cluster credential, at debug', async () => {
    const owner = await unverifiedUser(app, { password: 'a passphrase nobody will ever log 71' });
    secrets.set('password', 'a passphrase nobody will ever log 71');
    for (const [name, value] of owner.browser.cookies) secrets.set(`cookie ${name}`, value);
    secrets.set('verification token', await verificationToken(app, owner.email));
    await new Browser(app.url).api.POST('/v1/user/email-verification/confirm', { body: { token: secrets.get('verification token') ?? '' } });

    await new Browser(app.url).api.POST('/v1/auth/password-reset/request', { body: { email: owner.email } });
    const reset = /\/reset-password\?token=([a-z2-7]+)/.exec((await app.inbox.next(owner.email, { subject: SUBJECTS.reset })).text)?.[1] ?? '';
    secrets.set('reset token', reset);
    await new Browser(app.url).api.POST('/v1/auth/password-reset/confirm', { body: { token: reset, password: PASSWORD } });

    const { token: invitation } = await invite(app, await signedInAgain(owner.email), `invitee-${Date.now()}@example.com`);
    secrets.set('invitation token', invitation);
    await new Browser(app.url).api.GET('/v1/invitations/by-token/{token}', { params: { path: { token: invitation } } });

    const owner2 = await signedInAgain(owner.email);
    // A webhook signing secret, used to sign every event of the deployment below (nothing listens there).
    const { data: webhook } = await owner2.api.POST('/v1/organization/webhook-endpoints', { body: { url: 'http://127.0.0.1:9/hooks' } });
    secrets.set('webhook signing secret', webhook?.secret.slice('whsec_'.length) ?? '');
    const running = await deployment(app, owner2, 'running');
    const key = await apiKey(owner2, [running.id]);
    secrets.set('API key', key.key);
    await inferenceClient(app, key.key).chat.completions.create({ model: running.id, messages: [{ role: 'user', content: 'hi' }] });
    await inferenceClient(app, `${key.key.slice(0, -1)}x`).models.list().catch(() => undefined);

    const credentials = app.simulator?.credentials;
    if (!credentials) throw new Error('no cluster credentials');
    secrets.set('cluster admin password', credentials.adminPassword);
    secrets.set('cluster API key', credentials.apiKey);

    const log = lines.join('');
    expect(lines.length, "lines logged").toBeGreaterThan(10);
    for (const [name, value] of secrets) {
      expect(value.length, name).toBeGreaterThan(8);
      expect(log.includes(value), `the ${name} appears in the logs`).toBe(false);
    }
  });
});

async function signedInAgain(email: string) {
  const browser = new Browser(app.url);
  await browser.api.POST('/v1/user/signin', { body: { email, password: PASSWORD } });
  for (const [name, value] of browser.cookies) secrets.set(`cookie ${name} (second session)`, value);
  return { browser, api: browser.api };
}
