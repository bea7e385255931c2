import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { team } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import type { Api } from '../helpers/browser.ts';
import { unchecked } from '../helpers/http.ts';

/**
 * The billing guards on POST /api/v1/model-deployments, with billing enforcement on. The processor's
 * state of an account (default card, subscription) is written as the webhook job stores it.
 */
let app: TestApp;

beforeAll(async () => {
  app = await startTestApp({ BILLING_ENFORCEMENT: 'true' });
});
afterAll(() => app?.close());

const create = (api: Api) => api.POST('/api/v1/model-deployments', { body: { model_name: 'mistral-instruct-v0.3' } });

async function organizationOf(user: SignedInUser): Promise<number> {
  const id = (await user.api.GET('/v1/organization')).data?.id;
  if (!id) throw new Error('no organization');
  return id;
}

async function setAccount(organizationId: number, values: Record<string, unknown>): Promise<void> {
  await app.db('billing_accounts').where({ organization_id: organizationId }).update(values);
}

/** A default card and an active subscription (subscription ids are unique: one per organization). */
const paidUp = (organizationId: number) => ({
  default_payment_method_id: 'pm_card_visa',
  subscription_status: 'active',
  processor_subscription_id: `sub_guard_${organizationId}`,
});

/** Hosted-model tokens at qwen2.5-instruct's price (0.0000003 USD a token): `dollars` of estimated spending. */
async function spend(organizationId: number, dollars: number): Promise<void> {
  await app.db('usage_records').insert({
    request_id: `guard-${organizationId}-${dollars}`,
    organization_id: organizationId,
    route: '/v1/chat/completions',
    model: 'qwen2.5-instruct',
    unit: 'token',
    quantity: Math.round(dollars / 0.0000003),
  });
}

async function deploymentCount(organizationId: number): Promise<number> {
  const [row] = await app.db('deployments').where({ organization_id: organizationId }).count({ n: '*' });
  return Number(row?.n);
}

describe('deployment create guards', () => {
  it('refuses 409 PAYMENT_SETUP_INCOMPLETE without a default card, then without an active subscription', async () => {
    const owner = await registeredUser(app);
    const organizationId = await organizationOf(owner);
    const noCard = await create(owner.api);
    expect(noCard.response.status).toBe(409);
    expect(noCard.error).toMatchObject({ code: 'PAYMENT_SETUP_INCOMPLETE', detail: expect.stringContaining('payment method') });

    await setAccount(organizationId, { default_payment_method_id: 'pm_card_visa' });
    const noSubscription = await create(owner.api);
    expect(noSubscription.response.status).toBe(409);
    expect(noSubscription.error).toMatchObject({ code: 'PAYMENT_SETUP_INCOMPLETE', detail: expect.stringContaining('subscription') });

    await setAccount(organizationId, { ...paidUp(organizationId), subscription_status: 'past_due' });
    expect((await create(owner.api)).error?.code).toBe('PAYMENT_SETUP_INCOMPLETE');
    expect(await deploymentCount(organizationId)).toBe(0);

    await setAccount(organizationId, paidUp(organizationId));
    expect((await create(owner.api)).response.status).toBe(201);
  });

  it('lets exactly the limit through when creates race at max_active_resources', async () => {
    const owner = await registeredUser(app);
    const organizationId = await organizationOf(owner);
    await setAccount(organizationId, { ...paidUp(organizationId), max_active_resources: 1 });
    const answers = await Promise.all([create(owner.api), create(owner.api)]);
    expect(answers.map((a) => a.response.status).sort()).toEqual([201, 409]);
    expect(answers.find((a) => a.response.status === 409)?.error?.code).toBe('ACTIVE_DEPLOYMENT_LIMIT_REACHED');
    expect(await deploymentCount(organizationId)).toBe(1);
  });

  it('refuses 409 SPENDING_LIMIT_REACHED once the period’s estimated amount reaches the monthly limit', async () => {
    const owner = await registeredUser(app);
    const organizationId = await organizationOf(owner);
    await setAccount(organizationId, { ...paidUp(organizationId), monthly_spending_limit: '3.01' });
    await spend(organizationId, 3);
    expect((await create(owner.api)).response.status).toBe(201);

    await setAccount(organizationId, { monthly_spending_limit: '3.00' });
    const answers = await Promise.all([create(owner.api), create(owner.api)]);
    expect(answers.map((a) => a.response.status)).toEqual([409, 409]);
    expect(answers[0]?.error).toMatchObject({ code: 'SPENDING_LIMIT_REACHED', detail: expect.stringContaining('3.00') });
    expect(await deploymentCount(organizationId)).toBe(1);

    await setAccount(organizationId, { monthly_spending_limit: null });
    expect((await create(owner.api)).response.status).toBe(201);
  });
});

describe('GET and PUT /v1/billing/spending-limit', () => {
  const put = (api: Api, monthly_spending_limit: string | null) =>
    api.PUT('/v1/billing/spending-limit', { body: { monthly_spending_limit, currency: 'usd' } });

  it('is read by every role, set by admins, and stops creates once spending reaches it', async () => {
    const members = await team(app);
    const organizationId = await organizationOf(members.super_admin);
    expect((await members.viewer.api.GET('/v1/billing/spending-limit')).data).toEqual({ monthly_spending_limit: null, currency: 'usd' });
    expect((await put(members.member.api, '10')).response.status).toBe(403);
    expect((await put(members.viewer.api, '10')).response.status).toBe(403);

    expect((await put(members.admin.api, '2')).data).toEqual({ monthly_spending_limit: '2.00', currency: 'usd' });
    expect((await members.member.api.GET('/v1/billing/spending-limit')).data).toEqual({ monthly_spending_limit: '2.00', currency: 'usd' });
    await setAccount(organizationId, paidUp(organizationId));
    await spend(organizationId, 2);
    expect((await create(members.member.api)).error?.code).toBe('SPENDING_LIMIT_REACHED');

    expect((await put(members.super_admin.api, null)).data).toEqual({ monthly_spending_limit: null, currency: 'usd' });
    expect((await create(members.member.api)).response.status).toBe(201);
  });

  it.each(['-1', '1.234', 'ten', '1e3', ''])('refuses the limit %j with 422 VALIDATION_FAILED', async (limit) => {
    const { api } = await registeredUser(app);
    const { response, error } = await put(api, limit);
    expect(response.status).toBe(422);
    expect(error?.errors?.map((e) => e.location)).toContain('body/monthly_spending_limit');
  });

  it('refuses another currency and unknown fields with 422', async () => {
    const { api } = await registeredUser(app);
    const eur = await api.PUT('/v1/billing/spending-limit', { body: unchecked({ monthly_spending_limit: '5', currency: 'eur' }) });
    expect(eur.response.status).toBe(422);
    const extra = await api.PUT('/v1/billing/spending-limit', { body: unchecked({ monthly_spending_limit: '5', currency: 'usd', alerts: true }) });
    expect(extra.response.status).toBe(422);
  });
});
