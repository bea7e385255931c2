import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { usageSummary } from '../../src/metering/usage-summary.ts';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { operatorCli } from '../helpers/operator-cli.ts';
import { inferenceClient } from '../helpers/inference-client.ts';
import { waitUntil } from '../helpers/net.ts';

let app: TestApp;
let caller: SignedInUser;
const HOSTED = 'qwen2.5-instruct';
const SERVICE_KEY = `platform::hosted_model:${HOSTED}::`;

const cli = (...argv: string[]) => operatorCli(app, ...argv);

/** The user's organization (the one registering created). */
const organizationOf = async (user: SignedInUser): Promise<number> =>
  (await app.db('memberships as m').join('users as u', 'u.id', 'm.user_id').where('u.email', user.email).first('m.organization_id')).organization_id;

const hostedRows = (organizationId: number) => app.db('usage_records').where({ organization_id: organizationId, model: HOSTED }).whereNull('deployment_id').orderBy('created_at');

beforeAll(async () => {
  // The app's simulator is registered as the hosted cluster `local-hosted` too, as in `make run`.
  app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' }, { workers: true, cluster: { modelLoadMs: 100, tokenLatencyMs: 2 } });
  caller = await registeredUser(app);
});
afterAll(() => app.close());

describe('operators launch the hosted models', () => {
  it('launches a hosted catalog model on the hosted cluster through the real CLI, and lists it', async () => {
    const launched = await cli('hosted', 'launch', HOSTED);
    expect(launched).toMatchObject({ code: 0, stderr: '' });
    expect(launched.stdout).toBe(`${HOSTED}\tlocal-hosted\trunning\n`);
    const listed = await cli('hosted', 'list');
    expect(listed.stdout).toBe(`${HOSTED}\tlocal-hosted\thosted-${HOSTED}\trunning\n`);
    const refused = await cli('hosted', 'launch', 'qwen3');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('not enabled hosted models of the catalog: qwen3');
  });
});

describe('callers call a hosted model by its name', () => {
  it('answers a session, streamed and not, and a key that allows hosted models; lists it in /v1/models', async () => {
    await waitUntil(async () => (await caller.api.POST('/v1/chat/completions', { body: { model: HOSTED, messages: [{ role: 'user', content: 'hi' }] } })).response.status === 200, 'the hosted route');
    const { data: models } = await caller.api.GET('/v1/models');
    expect(models?.data).toContainEqual(expect.objectContaining({ id: HOSTED, owned_by: 'system', model_name: HOSTED, deployment_id: null }));

    const mine = await deployment(app, caller, 'running', { model_name: 'bge-m3' });
    const allowed = await apiKey(caller, [mine.id], { allow_hosted_models: true });
    const client = inferenceClient(app, allowed.key);
    const answer = await client.chat.completions.create({ model: HOSTED, messages: [{ role: 'user', content: 'Say hello' }] });
    expect(answer.usage?.total_tokens).toBeGreaterThan(0);
    const stream = await client.chat.completions.create({ model: HOSTED, messages: [{ role: 'user', content: 'a story' }], stream: true, max_tokens: 7 });
    let streamed = 0;
    for await (const chunk of stream) if (chunk.usage) streamed = chunk.usage.total_tokens;
    expect(streamed).toBeGreaterThan(7);
    expect((await client.models.list()).data.map((m) => m.id)).toEqual([mine.id, HOSTED]);

    const organizationId = await organizationOf(caller);
    await app.container.usage.flush();
    const rows = await hostedRows(organizationId);
    expect(rows).toHaveLength(3);
    expect(rows.map((r) => [r.unit, r.api_key_id, r.outcome, r.estimated])).toEqual([
      ['token', null, 'completed', false],
      ['token', allowed.id, 'completed', false],
      ['token', allowed.id, 'completed', false],
    ]);
    expect(Number(rows[1].quantity)).toBe(answer.usage?.total_tokens);
    expect(Number(rows[2].quantity)).toBe(streamed);
    expect(new Set(rows.map((r) => r.usage_id)).size).toBe(3);

    // The usage summary prices the hosted tokens at the hosted model's price.
    const tokens = rows.reduce((sum, r) => sum + Number(r.quantity), 0);
    const summary = await usageSummary(app.db, organizationId);
    const hosted = summary.usage_totals.find((t) => t.service_key === SERVICE_KEY);
    expect(hosted).toMatchObject({ meter: 'hosted_tokens', unit: 'token', unit_amount_decimal: '0.0000003', estimated_amount: '0.00' });
    expect(Number(hosted?.total_quantity)).toBe(tokens);
  });

  it('refuses a key without allow_hosted_models with 403 model_not_in_key_scope, until an admin turns it on', async () => {
    const mine = await deployment(app, caller, 'running', { model_name: 'bge-m3' });
    const plain = await apiKey(caller, [mine.id]);
    const client = inferenceClient(app, plain.key);
    const refused = await client.chat.completions.create({ model: HOSTED, messages: [{ role: 'user', content: 'hi' }] }).catch((error: unknown) => error);
    expect(refused).toMatchObject({ status: 403, code: 'model_not_in_key_scope', type: 'permission_error', param: 'model' });
    expect((await client.models.list()).data.map((m) => m.id)).toEqual([mine.id]);
    const unknown = await client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] }).catch((error: unknown) => error);
    expect(unknown).toMatchObject({ status: 404, code: 'model_not_found' });

    const { data } = await caller.api.PATCH('/v1/organization/api-keys/{api_key_id}', { params: { path: { api_key_id: plain.id } }, body: { allow_hosted_models: true } });
    expect(data?.allow_hosted_models).toBe(true);
    const answer = await client.chat.completions.create({ model: HOSTED, messages: [{ role: 'user', content: 'hi' }] });
    expect(answer.object).toBe('chat.completion');
  });

  it('gives a key for the hosted models only, and refuses a key that could call nothing', async () => {
    const user = await registeredUser(app);
    const hostedOnly = await apiKey(user, [], { allow_hosted_models: true });
    const client = inferenceClient(app, hostedOnly.key);
    expect((await client.chat.completions.create({ model: HOSTED, messages: [{ role: 'user', content: 'hi' }] })).object).toBe('chat.completion');
    expect((await client.models.list()).data.map((m) => m.id)).toContain(HOSTED);

    const nothing = await user.api.POST('/v1/organization/api-keys', { body: { name: 'nothing', deployment_ids: [] } });
    expect(nothing.response.status).toBe(422);
    expect(nothing.error).toMatchObject({ code: 'VALIDATION_FAILED', errors: [expect.objectContaining({ location: 'body/deployment_ids' })] });
    const narrowed = await user.api.PATCH('/v1/organization/api-keys/{api_key_id}', { params: { path: { api_key_id: hostedOnly.id } }, body: { allow_hosted_models: false } });
    expect(narrowed.response.status).toBe(422);
    expect(narrowed.error).toMatchObject({ code: 'VALIDATION_FAILED', errors: [expect.objectContaining({ location: 'body/allow_hosted_models' })] });
    const { data } = await user.api.GET('/v1/organization/api-keys');
    expect(data?.items.find((key) => key.id === hostedOnly.id)).toMatchObject({ allow_hosted_models: true, deployments: [] });
  });

  it('routes the name to the caller\'s own running deployment of the same model first', async () => {
    const other = await registeredUser(app);
    const dedicated = await deployment(app, other, 'running', { model_name: HOSTED, model_size_in_billions: 7 });
    const key = await apiKey(other, [dedicated.id], { allow_hosted_models: true });
    await inferenceClient(app, key.key).chat.completions.create({ model: HOSTED, messages: [{ role: 'user', content: 'mine' }] });
    await app.container.usage.flush();
    const rows = await app.db('usage_records').where({ api_key_id: key.id });
    expect(rows.map((r) => r.deployment_id)).toEqual([dedicated.id]);
    expect(await hostedRows(await organizationOf(other))).toEqual([]);
  });
});
