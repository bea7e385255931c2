import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registeredUser, uniqueEmail } from '../factories/accounts.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser } from '../helpers/browser.ts';

/**
 * User enumeration (ASVS 5.0 6.3.8): a failed sign-in or reset request says nothing of whether the
 * account exists, by status or by body. By time neither: an unknown account's password is checked
 * against a decoy hash (src/accounts/passwords.ts, `verifyPassword`), and a reset request is looked
 * up in the email job, after the answer (src/accounts/password-reset.service.ts). Registration must
 * say that an email is taken (409 `EMAIL_TAKEN`, as the interface document requires); it is limited
 * per client address instead (accounts.test.ts).
 */
let app: TestApp;
beforeAll(async () => {
  app = await startTestApp();
});
afterAll(() => app.close());

/** An answer without what differs on every request. */
const comparable = async (response: Response) => {
  const { request_id: _id, ...body } = (await response.json()) as Record<string, unknown>;
  return { status: response.status, body };
};

describe('no user enumeration', () => {
  it('answers a wrong password and an unknown account alike on sign-in', async () => {
    const { email } = await registeredUser(app);
    const signIn = (body: { email: string; password: string }) =>
      new Browser(app.url).fetch('/v1/user/signin', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const wrongPassword = await comparable(await signIn({ email, password: 'not the password at all' }));
    const unknownAccount = await comparable(await signIn({ email: uniqueEmail('nobody'), password: 'not the password at all' }));
    expect(wrongPassword.status).toBe(401);
    expect(unknownAccount).toEqual(wrongPassword);
  });

  it('answers a reset request for an account and for no account alike', async () => {
    const { email } = await registeredUser(app);
    const request = (address: string) =>
      new Browser(app.url).fetch('/v1/auth/password-reset/request', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: address }) });
    const known = await comparable(await request(email));
    expect(known.status).toBe(200);
    expect(await comparable(await request(uniqueEmail('nobody')))).toEqual(known);
  });
});
