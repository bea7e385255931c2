import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import { invitedMember, team } from '../factories/organizations.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { contractFetch } from '../helpers/contract.ts';
import { unchecked } from '../helpers/http.ts';
import { seenWithin, waitUntil } from '../helpers/net.ts';
import { operatorCli } from '../helpers/operator-cli.ts';
import { startServiceProcess, type ServiceProcess } from '../helpers/service-process.ts';

/**
 * Per-key limits on the inference proxy (src/inference/key-limiter.ts): set through the API-key
 * routes and the organization's defaults, announced in OpenAI's `x-ratelimit-*` headers, enforced
 * with 429 across two API processes sharing one Postgres (A: this test's in-process service, B: a
 * separate `node src/main.ts` with ROLE=api), and met by the official openai client as it retries.
 */
let app: TestApp;
let owner: SignedInUser;
let deploymentId: string;
let other: ServiceProcess;
let otherUrl: string;
/** A hosted model none of the test's deployments serves (a scoped deployment of the same name would take precedence). */
const HOSTED = 'llama-3.1-instruct';

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' }, { workers: true, cluster: { modelLoadMs: 20, tokenLatencyMs: 1 } });
  owner = await registeredUser(app);
  deploymentId = (await deployment(app, owner, 'running', { model_name: 'qwen2.5-instruct' })).id;
  // A dear hosted model, so that a spend budget is used up by one answer.
  await operatorCli(app, 'hosted', 'launch', HOSTED);
  await operatorCli(app, 'prices', 'set', `platform::hosted_model:${HOSTED}::`, '0.001');
  other = await startServiceProcess(app, { ROLE: 'api' });
  otherUrl = other.url as string;
});
afterAll(async () => {
  other?.kill();
  await app?.close();
});

/** A short chat completion with the key, on process A or B: the raw response, its body read. */
async function chat(key: string, on: 'A' | 'B' = 'A', model = deploymentId): Promise<{ status: number; headers: Headers; body: { error?: { code: string; type: string } } }> {
  const response = await fetch(`${on === 'A' ? app.url : otherUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
  });
  return { status: response.status, headers: response.headers, body: (await response.json()) as { error?: { code: string; type: string } } };
}

/** `GET /v1/models` with the key, answers checked against the document: the raw response, its body read. */
async function listModels(key: string): Promise<{ status: number; headers: Headers; body: { data?: Array<{ id: string }>; error?: { code: string; type: string } } }> {
  const response = await contractFetch(app.url)(`${app.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
  return { status: response.status, headers: response.headers, body: (await response.json()) as { data?: Array<{ id: string }>; error?: { code: string; type: string } } };
}

/** An `x-ratelimit-reset-*` duration (`20ms`, `1.5s`, `1m0s`, `1h2m3s`) in milliseconds. */
function durationMs(text: string | null): number {
  const match = /^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$/.exec(text ?? '');
  if (!text || !match) throw new Error(`not a reset duration: ${String(text)}`);
  const [, hours = '0', minutes = '0', seconds = '0', ms = '0'] = match;
  return Math.round(Number(hours) * 3_600_000 + Number(minutes) * 60_000 + Number(seconds) * 1000 + Number(ms));
}

/** The tokens the key's answers used, as the usage records count them. */
async function tokensUsedBy(keyId: number): Promise<number> {
  await app.container.usage.flush();
  const row = await app.db('usage_records').where({ api_key_id: keyId }).sum({ tokens: 'total_tokens' }).first();
  return Number(row?.tokens ?? 0);
}

describe('setting limits', () => {
  it('stores a key’s limits on create and update, null taking the organization’s default', async () => {
    const { data: created } = await owner.api.POST('/v1/organization/api-keys', {
      body: { name: 'limited', deployment_ids: [deploymentId], limits: { requests_per_minute: 600, monthly_spend_budget: '25.5' } },
    });
    expect(created?.api_key.limits).toEqual({ requests_per_minute: 600, tokens_per_minute: null, monthly_token_budget: null, monthly_spend_budget: '25.50' });
    const id = created?.api_key.id ?? 0;
    const { data: updated } = await owner.api.PATCH('/v1/organization/api-keys/{api_key_id}', {
      params: { path: { api_key_id: id } },
      body: { limits: { requests_per_minute: null, tokens_per_minute: 1000, monthly_token_budget: 5_000_000_000 } },
    });
    expect(updated?.limits).toEqual({ requests_per_minute: null, tokens_per_minute: 1000, monthly_token_budget: 5_000_000_000, monthly_spend_budget: '25.50' });
    const { data: listed } = await owner.api.GET('/v1/organization/api-keys');
    expect(listed?.items.find((key) => key.id === id)?.limits).toEqual(updated?.limits);
  });

  it.each([
    [{ requests_per_minute: 0 }, 'body/limits/requests_per_minute'],
    [{ tokens_per_minute: -5 }, 'body/limits/tokens_per_minute'],
    [{ monthly_spend_budget: '0' }, 'body/limits/monthly_spend_budget'],
    [{ monthly_spend_budget: '1.234' }, 'body/limits/monthly_spend_budget'],
    [{ requests_per_second: 5 }, 'body/limits/requests_per_second'],
  ])('refuses the limits %o with 422 naming the field', async (limits, location) => {
    const { error, response } = await owner.api.POST('/v1/organization/api-keys', { body: { name: 'bad', deployment_ids: [deploymentId], limits: unchecked(limits) } });
    expect(response.status).toBe(422);
    expect(error?.errors?.map((issue) => issue.location)).toContain(location);
  });

  it('lets admins read and replace the organization’s defaults, and refuses members', async () => {
    const { admin } = await team(app);
    expect((await admin.api.GET('/v1/organization/api-key-limits')).data).toEqual({ requests_per_minute: null, tokens_per_minute: null, monthly_token_budget: null, monthly_spend_budget: null });
    const defaults = { requests_per_minute: 100, tokens_per_minute: null, monthly_token_budget: 1_000_000, monthly_spend_budget: '250.00' };
    expect((await admin.api.PUT('/v1/organization/api-key-limits', { body: defaults })).data).toEqual(defaults);
    expect((await admin.api.GET('/v1/organization/api-key-limits')).data).toEqual(defaults);
    const member = await invitedMember(app, admin, 'member');
    expect((await member.api.GET('/v1/organization/api-key-limits')).response.status).toBe(403);
  });
});

describe('enforcing limits on the inference routes', () => {
  it('sends no x-ratelimit headers for a key without limits', async () => {
    const { key } = await apiKey(owner, [deploymentId]);
    const answer = await chat(key);
    expect(answer.status).toBe(200);
    expect([...answer.headers.keys()].filter((name) => name.startsWith('x-ratelimit'))).toEqual([]);
  });

  it('announces both per-minute limits in OpenAI’s headers', async () => {
    const { key } = await apiKey(owner, [deploymentId], { limits: { requests_per_minute: 100, tokens_per_minute: 600 } });
    const first = await chat(key);
    expect(first.status).toBe(200);
    expect(first.headers.get('x-ratelimit-limit-requests')).toBe('100');
    expect(Number(first.headers.get('x-ratelimit-remaining-requests'))).toBeLessThanOrEqual(99);
    expect(first.headers.get('x-ratelimit-reset-requests')).toMatch(/^(\d+ms|\d+(\.\d+)?s)$/);
    expect(first.headers.get('x-ratelimit-limit-tokens')).toBe('600');
    expect(first.headers.get('x-ratelimit-reset-tokens')).toMatch(/^(\d+ms|(\d+m)?\d+(\.\d+)?s)$/);
    const second = await chat(key);
    // The first answer's tokens are counted (they refill at 10 a second).
    expect(Number(second.headers.get('x-ratelimit-remaining-tokens'))).toBeLessThan(600);
  });

  it('answers 429 rate_limit_exceeded with Retry-After once the requests per minute are used', async () => {
    const { key } = await apiKey(owner, [deploymentId], { limits: { requests_per_minute: 5 } });
    const statuses = [];
    for (let i = 0; i < 5; i++) statuses.push((await chat(key)).status);
    expect(statuses).toEqual([200, 200, 200, 200, 200]);
    const refused = await chat(key);
    expect(refused.status).toBe(429);
    expect(refused.body.error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limit_exceeded' });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(Number(refused.headers.get('retry-after-ms'))).toBeGreaterThan(0);
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0');
  });

  it('says on a 429 the same wait in x-ratelimit-reset-requests as in Retry-After and retry-after-ms', async () => {
    // Refills one request every 30 s: the second answer leaves nothing, the third is refused.
    const { key } = await apiKey(owner, [deploymentId], { limits: { requests_per_minute: 2 } });
    const first = await chat(key);
    expect(first.headers.get('x-ratelimit-remaining-requests')).toBe('1');
    // One request used: whole again once it has refilled.
    expect(durationMs(first.headers.get('x-ratelimit-reset-requests'))).toBeGreaterThan(29_000);
    expect(durationMs(first.headers.get('x-ratelimit-reset-requests'))).toBeLessThanOrEqual(30_000);
    const second = await chat(key);
    expect(second.status).toBe(200);
    expect(second.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    // Nothing left: the time until the next request is admitted, not until the limit is whole (60 s).
    const lastAllowedReset = durationMs(second.headers.get('x-ratelimit-reset-requests'));
    expect(lastAllowedReset).toBeGreaterThan(29_000);
    expect(lastAllowedReset).toBeLessThanOrEqual(30_000);
    const refused = await chat(key);
    expect(refused.status).toBe(429);
    expect(refused.body.error?.code).toBe('rate_limit_exceeded');
    const waitMs = Number(refused.headers.get('retry-after-ms'));
    expect(waitMs).toBeGreaterThan(29_000);
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    expect(durationMs(refused.headers.get('x-ratelimit-reset-requests'))).toBe(waitMs);
    expect(Number(refused.headers.get('retry-after'))).toBe(Math.ceil(waitMs / 1000));
    expect(lastAllowedReset).toBeGreaterThanOrEqual(waitMs);
  });

  it('admits no more than the limit across two API processes', async () => {
    const limit = 10;
    const { key } = await apiKey(owner, [deploymentId], { limits: { requests_per_minute: limit } });
    const started = Date.now();
    const answers = await Promise.all(Array.from({ length: 3 * limit }, (_, i) => chat(key, i % 2 ? 'B' : 'A')));
    const seconds = (Date.now() - started) / 1000;
    const admitted = answers.filter((answer) => answer.status === 200);
    // The bucket refills at limit / 60 per second while the requests run.
    expect(admitted.length).toBeGreaterThanOrEqual(limit);
    expect(admitted.length).toBeLessThanOrEqual(limit + Math.ceil((seconds * limit) / 60));
    expect(answers.filter((answer) => answer.status === 429).every((answer) => answer.body.error?.code === 'rate_limit_exceeded')).toBe(true);
    expect(answers.length - admitted.length).toBeGreaterThan(0);
  });

  it('applies the organization’s default to a key without its own, in every process within a second', async () => {
    const { admin } = await team(app);
    const mine = await deployment(app, admin, 'running', { model_name: 'qwen2.5-instruct' });
    const { key } = await apiKey(admin, [mine.id]);
    expect((await chat(key, 'B', mine.id)).headers.get('x-ratelimit-limit-requests')).toBeNull();
    await admin.api.PUT('/v1/organization/api-key-limits', { body: { requests_per_minute: 7, tokens_per_minute: null, monthly_token_budget: null, monthly_spend_budget: null } });
    await seenWithin(async () => (await chat(key, 'B', mine.id)).headers.get('x-ratelimit-limit-requests') === '7', performance.now(), 1_000, 'process B to apply the default');
    expect((await chat(key, 'A', mine.id)).headers.get('x-ratelimit-limit-requests')).toBe('7');
  });

  it('refuses with insufficient_quota and x-should-retry: false once the monthly token budget is used', async () => {
    const budget = 60;
    const { key, id } = await apiKey(owner, [deploymentId], { limits: { monthly_token_budget: budget } });
    const answers = [];
    for (let i = 0; i < 50; i++) {
      const answer = await chat(key);
      answers.push(answer);
      if (answer.status !== 200) break;
    }
    const refused = answers.at(-1);
    expect(refused?.status).toBe(429);
    expect(refused?.body.error).toMatchObject({ type: 'rate_limit_error', code: 'insufficient_quota' });
    expect(refused?.headers.get('x-should-retry')).toBe('false');
    expect(Number(refused?.headers.get('retry-after'))).toBeGreaterThan(0);
    // Admitted while tokens were left; the last admitted answer may go beyond the budget, not further.
    const used = await tokensUsedBy(id);
    const perAnswer = used / (answers.length - 1);
    expect(used).toBeGreaterThanOrEqual(budget);
    expect(used).toBeLessThan(budget + 2 * perAnswer);
  });

  it('refuses the key once the hosted models’ tokens have spent its monthly budget', async () => {
    const { key } = await apiKey(owner, [deploymentId], { allow_hosted_models: true, limits: { monthly_spend_budget: '0.01' } });
    // At $0.001 a token, one answer spends more than $0.01.
    expect((await chat(key, 'A', HOSTED)).status).toBe(200);
    await waitUntil(async () => (await chat(key, 'A', HOSTED)).body.error?.code === 'insufficient_quota', 'the spend budget to refuse', 5_000);
    // A key whose budget is used is refused on every route, the organization's own deployments included.
    expect((await chat(key, 'A', deploymentId)).body.error?.code).toBe('insufficient_quota');
  });
});

describe('listing models under the limits', () => {
  it('counts a listing as a request against requests_per_minute, with the x-ratelimit headers, and refuses it over the limit', async () => {
    const { key } = await apiKey(owner, [deploymentId], { limits: { requests_per_minute: 2 } });
    const listed = await listModels(key);
    expect(listed.status).toBe(200);
    expect(listed.body.data?.map((model) => model.id)).toContain(deploymentId);
    expect(listed.headers.get('x-ratelimit-limit-requests')).toBe('2');
    expect(listed.headers.get('x-ratelimit-remaining-requests')).toBe('1');
    expect(durationMs(listed.headers.get('x-ratelimit-reset-requests'))).toBeGreaterThan(0);
    // The listing and a chat completion share the minute's requests.
    const chatted = await chat(key);
    expect(chatted.status).toBe(200);
    expect(chatted.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    const refused = await listModels(key);
    expect(refused.status).toBe(429);
    expect(refused.body.error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limit_exceeded' });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0');
  });

  it('answers 429 insufficient_quota to a key whose monthly budget is used up', async () => {
    const { key } = await apiKey(owner, [deploymentId], { limits: { monthly_token_budget: 1 } });
    expect((await listModels(key)).status).toBe(200);
    await waitUntil(async () => (await chat(key)).status === 429, 'the budget to be used up', 5_000);
    const refused = await listModels(key);
    expect(refused.status).toBe(429);
    expect(refused.body.error).toMatchObject({ type: 'rate_limit_error', code: 'insufficient_quota' });
    expect(refused.headers.get('x-should-retry')).toBe('false');
    // As the official client meets it: a RateLimitError, not retried.
    const client = new OpenAI({ apiKey: key, baseURL: `${app.url}/v1`, maxRetries: 2, fetch: contractFetch(app.url) });
    await expect(client.models.list()).rejects.toMatchObject({ status: 429, code: 'insufficient_quota' });
  });

  it('sends no x-ratelimit headers on a listing for a key without limits', async () => {
    const { key } = await apiKey(owner, [deploymentId]);
    const listed = await listModels(key);
    expect(listed.status).toBe(200);
    expect([...listed.headers.keys()].filter((name) => name.startsWith('x-ratelimit'))).toEqual([]);
  });
});

describe('the official openai client against the limits', () => {
  /** The client with retries on, recording the status of every attempt. */
  const retryingClient = (key: string, statuses: number[]) => {
    const inner = contractFetch(app.url);
    return new OpenAI({
      apiKey: key,
      baseURL: `${app.url}/v1`,
      maxRetries: 2,
      fetch: async (url: string | URL | Request, init?: RequestInit) => {
        const response = await inner(url, init);
        statuses.push(response.status);
        return response;
      },
    });
  };

  it('waits Retry-After and succeeds once the per-minute limit has refilled', async () => {
    const { key } = await apiKey(owner, [deploymentId], { limits: { requests_per_minute: 60 } });
    // A burst beyond the bucket (it refills at one request a second).
    const burst = await Promise.all(Array.from({ length: 80 }, () => chat(key)));
    expect(burst.some((answer) => answer.status === 429)).toBe(true);
    const statuses: number[] = [];
    const answer = await retryingClient(key, statuses).chat.completions.create({ model: deploymentId, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    expect(answer.object).toBe('chat.completion');
    expect(statuses[0]).toBe(429);
    expect(statuses.at(-1)).toBe(200);
  });

  it('does not retry a used-up budget', async () => {
    const { key } = await apiKey(owner, [deploymentId], { limits: { monthly_token_budget: 1 } });
    await waitUntil(async () => (await chat(key)).status === 429, 'the budget to be used up', 5_000);
    const statuses: number[] = [];
    const call = retryingClient(key, statuses).chat.completions.create({ model: deploymentId, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    await expect(call).rejects.toBeInstanceOf(OpenAI.RateLimitError);
    expect(statuses).toEqual([429]);
  });
});
