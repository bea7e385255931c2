import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser, unverifiedUser, type SignedInUser } from '../factories/accounts.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { keyClient } from '../helpers/browser.ts';
import { inferenceClient } from '../helpers/inference-client.ts';
import { operatorCli } from '../helpers/operator-cli.ts';
import { waitUntil } from '../helpers/net.ts';

/**
 * Hosted models under BILLING_ENFORCEMENT: a hosted call needs what creating a deployment needs (payment set up, the spending limit not
 * reached) and, by session, a verified email. The processor's state of an account (default card,
 * subscription) is written as the webhook job stores it, as deployment-guards.test.ts does.
 */
let app: TestApp;
const HOSTED = 'qwen2.5-instruct';
const chat = { model: HOSTED, messages: [{ role: 'user' as const, content: 'hi' }] };

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING, BILLING_ENFORCEMENT: 'true' }, { workers: true, cluster: { modelLoadMs: 100, tokenLatencyMs: 2 } });
  expect((await operatorCli(app, 'hosted', 'launch', HOSTED)).code).toBe(0);
});
afterAll(() => app.close());

async function organizationOf(user: SignedInUser): Promise<number> {
  const id = (await user.api.GET('/v1/organization')).data?.id;
  if (!id) throw new Error('no organization');
  return id;
}

/** A default card and an active subscription, as the processor's webhooks leave them. */
async function paidUp(user: SignedInUser, extra: Record<string, unknown> = {}): Promise<number> {
  const organizationId = await organizationOf(user);
  await app
    .db('billing_accounts')
    .where({ organization_id: organizationId })
    .update({ default_payment_method_id: 'pm_card_visa', subscription_status: 'active', processor_subscription_id: `sub_hosted_${organizationId}`, ...extra });
  return organizationId;
}

describe('hosted models with billing enforcement on', () => {
  it('answers an organization with payment set up, by session and by key', async () => {
    const owner = await registeredUser(app);
    await paidUp(owner);
    await waitUntil(async () => (await owner.api.POST('/v1/chat/completions', { body: chat })).response.status === 200, 'the hosted route');
    const { key } = await apiKey(owner, [], { allow_hosted_models: true });
    const answer = await inferenceClient(app, key).chat.completions.create(chat);
    expect(answer.usage?.total_tokens).toBeGreaterThan(0);
  });

  it('refuses an organization with no payment setup with 429 insufficient_quota, by session and by key, as creating a deployment is refused', async () => {
    const owner = await registeredUser(app);
    const deployment = await owner.api.POST('/api/v1/model-deployments', { body: { model_name: 'mistral-instruct-v0.3' } });
    expect(deployment.error?.code).toBe('PAYMENT_SETUP_INCOMPLETE');

    const bySession = await owner.api.POST('/v1/chat/completions', { body: chat });
    expect(bySession.response.status).toBe(429);
    expect(bySession.error).toMatchObject({ error: { code: 'insufficient_quota', type: 'rate_limit_error', message: expect.stringContaining('no default payment method') } });
    expect(bySession.response.headers.get('x-should-retry')).toBe('false');
    const { key } = await apiKey(owner, [], { allow_hosted_models: true });
    const byKey = await keyClient(app.url, key).POST('/v1/chat/completions', { body: chat });
    expect(byKey.response.status).toBe(429);
    expect(byKey.error).toMatchObject({ error: { code: 'insufficient_quota' } });
    await app.container.usage.flush();
    expect(await app.db('usage_records').where({ organization_id: await organizationOf(owner), model: HOSTED }).first()).toBeUndefined();
  });

  it('refuses an organization past its monthly spending limit with 429 insufficient_quota', async () => {
    const owner = await registeredUser(app);
    const organizationId = await paidUp(owner, { monthly_spending_limit: '1.00' });
    await app.db('usage_records').insert({ request_id: `hosted-spent-${organizationId}`, organization_id: organizationId, route: '/v1/chat/completions', model: HOSTED, unit: 'token', quantity: Math.round(2 / 0.0000003) });
    const { error, response } = await owner.api.POST('/v1/chat/completions', { body: chat });
    expect(response.status).toBe(429);
    expect(error).toMatchObject({ error: { code: 'insufficient_quota', message: expect.stringContaining('has reached its monthly limit of 1.00') } });
  });

  it('refuses a session of an unverified account, even of a paid-up organization, with 403', async () => {
    const newcomer = await unverifiedUser(app);
    await paidUp(newcomer);
    const { error, response } = await newcomer.api.POST('/v1/chat/completions', { body: chat });
    expect(response.status).toBe(403);
    expect(error).toMatchObject({ error: { code: 'insufficient_role', message: expect.stringContaining('Verify your email first') } });
  });
});
