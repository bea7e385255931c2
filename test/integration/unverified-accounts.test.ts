import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKey } from '../factories/api-keys.ts';
import { PASSWORD, registeredUser, signedIn, SUBJECTS, uniqueEmail, unverifiedUser, type SignedInUser } from '../factories/accounts.ts';
import { invite } from '../factories/organizations.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser, keyClient } from '../helpers/browser.ts';
import { statusOf } from '../helpers/http.ts';
import { operatorCli } from '../helpers/operator-cli.ts';
import { waitUntil } from '../helpers/net.ts';

/**
 * What an account that never proved its email may do: nothing that outlives it, no hosted model, and what it made before
 * this rule does not survive the owner of the address taking it back.
 */
let app: TestApp;
const HOSTED = 'qwen2.5-instruct';
const INVITATIONS_PER_DAY = 3;
const chat = { model: HOSTED, messages: [{ role: 'user' as const, content: 'hi' }] };

beforeAll(async () => {
  app = await startTestApp(
    { ...FAST_PROVISIONING, WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', INVITATIONS_PER_DAY: String(INVITATIONS_PER_DAY) },
    { workers: true, cluster: { modelLoadMs: 100, tokenLatencyMs: 2 } },
  );
  expect((await operatorCli(app, 'hosted', 'launch', HOSTED)).code).toBe(0);
});
afterAll(() => app.close());

/** Runs `make` as if `user` had proven their address, then puts it back: what an unverified account made before the rule. */
async function madeBeforeTheRule<T>(user: SignedInUser, make: () => Promise<T>): Promise<T> {
  await app.db('users').where({ id: user.user.id }).update({ email_verified_at: new Date() });
  try {
    return await make();
  } finally {
    await app.db('users').where({ id: user.user.id }).update({ email_verified_at: null });
  }
}

describe('an account whose email is not verified', () => {
  it('creates no API key, invitation or webhook endpoint, and calls no hosted model: 403 EMAIL_NOT_VERIFIED', async () => {
    const verified = await registeredUser(app);
    await waitUntil(async () => (await verified.api.POST('/v1/chat/completions', { body: chat })).response.status === 200, 'the hosted route');

    const squatter = await unverifiedUser(app);
    const key = await squatter.api.POST('/v1/organization/api-keys', { body: { name: 'backup', deployment_ids: [], allow_hosted_models: true } });
    const invitation = await squatter.api.POST('/v1/organization/invitations', { body: { email: uniqueEmail('friend'), role: 'admin' } });
    const webhook = await squatter.api.POST('/v1/organization/webhook-endpoints', { body: { url: 'http://127.0.0.1:9/hooks' } });
    for (const { response, error } of [key, invitation, webhook]) {
      expect(response.status).toBe(403);
      expect(error).toMatchObject({ code: 'EMAIL_NOT_VERIFIED', detail: expect.stringContaining('Verify your email first') });
    }
    const hosted = await squatter.api.POST('/v1/chat/completions', { body: chat });
    expect(hosted.response.status).toBe(403);
    expect(hosted.error).toMatchObject({ error: { code: 'insufficient_role', type: 'permission_error', message: expect.stringContaining('Verify your email first') } });

    expect(await app.db('api_keys').where({ created_by_user_id: squatter.user.id }).first()).toBeUndefined();
    expect(await app.db('invitations').where({ invited_by_user_id: squatter.user.id }).first()).toBeUndefined();
    expect(await app.db('webhook_endpoints').where({ created_by_user_id: squatter.user.id }).first()).toBeUndefined();
  });

  it('leaves nothing behind when the owner of the address takes it back with a reset', async () => {
    const email = uniqueEmail('victim');
    const squatter = await unverifiedUser(app, { email, organization: 'Victim Workspace' });
    const elsewhere = await signedIn(app, email);
    const { key, friend, hook } = await madeBeforeTheRule(squatter, async () => ({
      key: await apiKey(squatter, [], { allow_hosted_models: true }),
      friend: await invite(app, squatter, uniqueEmail('mallory2'), 'admin'),
      hook: (await squatter.api.POST('/v1/organization/webhook-endpoints', { body: { url: 'http://127.0.0.1:9/hooks' } })).data,
    }));
    expect(await statusOf(keyClient(app.url, key.key).POST('/v1/chat/completions', { body: chat }))).toBe(200);

    await new Browser(app.url).api.POST('/v1/auth/password-reset/request', { body: { email } });
    const resetMail = await app.inbox.next(email, { subject: SUBJECTS.reset });
    const token = /reset-password\?token=([a-z2-7]+)/.exec(resetMail.text)?.[1] ?? '';
    expect(await statusOf(new Browser(app.url).api.POST('/v1/auth/password-reset/confirm', { body: { token, password: 'the owner’s own passphrase' } }))).toBe(200);

    // Every session of the squatter ends; the key, the invitation and the webhook endpoint are gone with them.
    expect(await statusOf(squatter.api.GET('/v1/auth/session'))).toBe(401);
    expect(await statusOf(elsewhere.api.GET('/v1/auth/session'))).toBe(401);
    const refused = await keyClient(app.url, key.key).POST('/v1/chat/completions', { body: chat });
    expect(refused.response.status).toBe(401);
    expect(refused.error).toMatchObject({ error: { code: 'api_key_revoked' } });
    const registered = await new Browser(app.url).api.POST('/v1/invitations/register', { body: { token: friend.token, password: PASSWORD } });
    expect(registered.response.status).toBe(409);
    expect(registered.error?.code).toBe('INVITATION_NOT_PENDING');

    const owner = await signedIn(app, email, 'the owner’s own passphrase');
    expect(owner.user).toMatchObject({ organization: 'Victim Workspace', email_verified: true });
    const { data: keys } = await owner.api.GET('/v1/organization/api-keys');
    expect(keys?.items.map((k) => [k.id, k.status])).toEqual([[key.id, 'revoked']]);
    const { data: endpoint } = await owner.api.GET('/v1/organization/webhook-endpoints/{webhook_endpoint_id}', { params: { path: { webhook_endpoint_id: hook?.endpoint.id ?? '' } } });
    expect(endpoint).toMatchObject({ status: 'disabled', disabled_reason: expect.stringContaining('first proven') });
    // The owner now acts as any verified owner does.
    expect(await statusOf(owner.api.POST('/v1/chat/completions', { body: chat }))).toBe(200);
  });
});

describe('invitation emails', () => {
  it(`sends at most INVITATIONS_PER_DAY (${INVITATIONS_PER_DAY}) an organization a day, resends included, then 429 with Retry-After`, async () => {
    const owner = await registeredUser(app);
    const { data: first } = await owner.api.POST('/v1/organization/invitations', { body: { email: uniqueEmail('one'), role: 'member' } });
    expect(await statusOf(owner.api.POST('/v1/organization/invitations', { body: { email: uniqueEmail('two'), role: 'member' } }))).toBe(201);
    expect(await statusOf(owner.api.POST('/v1/organization/invitations/{invitation_id}/resend', { params: { path: { invitation_id: first?.id ?? 0 } } }))).toBe(200);

    const over = await owner.api.POST('/v1/organization/invitations', { body: { email: uniqueEmail('four'), role: 'member' } });
    expect(over.response.status).toBe(429);
    expect(over.error).toMatchObject({ code: 'RATE_LIMITED', detail: expect.stringContaining(`${INVITATIONS_PER_DAY} invitation emails in 24 hours`) });
    expect(Number(over.response.headers.get('retry-after'))).toBeGreaterThan(23 * 3600);
    const resent = await owner.api.POST('/v1/organization/invitations/{invitation_id}/resend', { params: { path: { invitation_id: first?.id ?? 0 } } });
    expect(resent.response.status).toBe(429);
    // Another organization has its own count.
    expect(await statusOf((await registeredUser(app)).api.POST('/v1/organization/invitations', { body: { email: uniqueEmail('five'), role: 'member' } }))).toBe(201);
  });

  it('quotes the organization and inviter names in the subject and body, bounded, with no link or markup', async () => {
    const spam = 'ACME Security: your account is locked, visit https://evil.example/unlock <b>now</b>';
    const owner = await registeredUser(app, { organization: spam, name: 'Support <support@evil.example>' });
    const to = uniqueEmail('target');
    const { message } = await invite(app, owner, to, 'member');
    expect(message.subject).toBe('Invitation to join "ACME Security your account is locked, v…"');
    expect(message.text).toContain('"Support support evil example" invited you to join the organization "ACME Security your account is locked, v…" as a member.');
    for (const part of [message.subject, message.text]) {
      expect(part).not.toContain('evil.example');
      expect(part).not.toContain('@');
      expect(part).not.toContain('<b>');
      expect(part).not.toContain('https://evil');
    }
  });
});
