import type { IncomingMessage, ServerResponse } from 'node:http';
import { BadRequestError, NotFoundError, RateLimitError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment, type Deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { keyClient } from '../helpers/browser.ts';
import { EngineStub } from '../helpers/engine-stub.ts';
import { jsonOf, type Problem } from '../helpers/http.ts';
import { inferenceClient } from '../helpers/inference-client.ts';
import { waitUntil } from '../helpers/net.ts';
import { operatorCli } from '../helpers/operator-cli.ts';

/**
 * The OpenAI surface beyond chat, as the official openai client meets it: one model
 * retrieved with the listing's visibility, the legacy completions for the models whose Xinference
 * specification has `generate`, metered as chat is, and OpenAI's answer to a URL the service does
 * not have. The deployments' engine is a stub in front of the cluster simulator that passes every
 * request through (unless a test scripts it), so a test sees what reached the engine; the hosted
 * model runs on the simulator itself.
 */
let app: TestApp;
let stub: EngineStub;
let owner: SignedInUser;
let chat: Deployment;
/** A second running deployment of the chat model: the name is ambiguous between the two. */
let twin: Deployment;
let code: Deployment;
let embedder: Deployment;
const HOSTED = 'qwen2.5-instruct';
const CODE = 'codestral-v0.1';
const COMPLETIONS = 'POST /v1/completions';
const CHAT = 'POST /v1/chat/completions';

const client = (key: string) => inferenceClient(app, key);
/** The completions the engine received, through the stub or (a hosted model) on the simulator itself. */
const engineCompletions = () => app.simulator?.requests[COMPLETIONS] ?? 0;

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' }, { workers: true, cluster: { modelLoadMs: 50, tokenLatencyMs: 1 } });
  stub = await EngineStub.inFrontOf(app);
  owner = await registeredUser(app);
  // Placed before the hosted model is launched: with the stub as their cluster's endpoint, the GPU
  // ledger no longer counts the hosted cluster (the simulator's own endpoint) as the same machine,
  // so a deployment placed after the launch could be offered the hosted model's GPU.
  [chat, twin, code, embedder] = await Promise.all([
    deployment(app, owner, 'running', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 }),
    deployment(app, owner, 'running', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 }),
    deployment(app, owner, 'running', { model_name: CODE }),
    deployment(app, owner, 'running', { model_name: 'bge-m3' }),
  ]);
  const launched = await operatorCli(app, 'hosted', 'launch', HOSTED);
  if (launched.code !== 0) throw new Error(`hosted launch: ${launched.stderr}`);
}, 120_000);

afterAll(async () => {
  await app?.close();
  await stub?.stop();
});

/** What a refused call threw: its status, code and param. */
const refusal = (error: unknown) => {
  const { status, code, param } = error as { status?: number; code?: string; param?: string };
  return { status, code, param };
};

describe('GET /v1/models/{model}', () => {
  it('answers a model of the key\u2019s listing, by deployment id or by model name, as the listing shows it', async () => {
    const { key } = await apiKey(owner, [chat.id, code.id]);
    const listed = (await client(key).models.list()).data;
    expect(listed.map((m) => m.id).sort()).toEqual([chat.id, code.id].sort());
    const entryOf = (id: string) => listed.find((m) => m.id === id);
    expect(await client(key).models.retrieve(chat.id)).toEqual(entryOf(chat.id));
    expect(await client(key).models.retrieve('qwen2.5-instruct')).toEqual(entryOf(chat.id));
    expect(await client(key).models.retrieve(CODE)).toEqual({ id: code.id, object: 'model', created: expect.any(Number), owned_by: 'organization', model_name: CODE, deployment_id: code.id });
  });

  it('answers 404 model_not_found for what the key may not call or see, an encoded name included', async () => {
    // A deployment that stays loading while the test runs.
    app.simulator?.setModelLoadMs(60_000);
    const loading = await deployment(app, owner, 'requested', { model_name: 'gemma-3-it' });
    try {
      // Scoped to the embedder and the loading deployment, without allow_hosted_models.
      const { key } = await apiKey(owner, [embedder.id, loading.id]);
      const notFound = { status: 404, code: 'model_not_found', param: 'model' };
      // Another deployment of the organization, by id and by name; the hosted model; a deployment not running; unknown names.
      for (const model of [chat.id, 'qwen2.5-instruct', HOSTED, loading.id, 'gemma-3-it', 'no-such-model', 'org/model v2']) {
        const error = await client(key).models.retrieve(model).catch((failure: unknown) => failure);
        expect(error, model).toBeInstanceOf(NotFoundError);
        expect(refusal(error), model).toEqual(notFound);
      }
      // What a call to it answers meanwhile: it is known to the key, only not running.
      const called = await client(key).chat.completions.create({ model: loading.id, messages: [{ role: 'user', content: 'hi' }] }).catch((failure: unknown) => failure);
      expect(refusal(called)).toMatchObject({ status: 503, code: 'deployment_not_running' });
      // The SDK encodes the name; the route reads it decoded (the message names it as sent).
      const raw = await fetch(`${app.url}/v1/models/org%2Fmodel%20v2`, { headers: { authorization: `Bearer ${key}` } });
      expect(await jsonOf(raw)).toEqual({ error: { message: 'The model `org/model v2` does not exist or you do not have access to it.', type: 'not_found_error', code: 'model_not_found', param: 'model' } });
      expect(await client(key).models.retrieve(embedder.id)).toMatchObject({ id: embedder.id, model_name: 'bge-m3' });
    } finally {
      app.simulator?.setModelLoadMs(50);
      // Its GPUs go back to the tests that follow.
      await owner.api.DELETE('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: loading.id } } });
    }
  });

  it('answers a hosted model to a key that allows hosted models and to a session, the caller\u2019s own deployment of the name first', async () => {
    const hostedOnly = await apiKey(owner, [embedder.id], { allow_hosted_models: true });
    const hostedEntry = { id: HOSTED, object: 'model', created: expect.any(Number), owned_by: 'system', model_name: HOSTED, deployment_id: null };
    expect(await client(hostedOnly.key).models.retrieve(HOSTED)).toEqual(hostedEntry);
    const withDeployment = await apiKey(owner, [chat.id], { allow_hosted_models: true });
    expect(await client(withDeployment.key).models.retrieve(HOSTED)).toMatchObject({ id: chat.id, deployment_id: chat.id });

    // A session: someone without deployments gets the hosted model; the owner their own deployment.
    const newcomer = await registeredUser(app);
    const { data, response } = await newcomer.api.GET('/v1/models/{model}', { params: { path: { model: HOSTED } } });
    expect(response.status).toBe(200);
    expect(data).toEqual(hostedEntry);
    const { data: embedding } = await owner.api.GET('/v1/models/{model}', { params: { path: { model: 'bge-m3' } } });
    expect(embedding).toMatchObject({ id: embedder.id, owned_by: 'organization', deployment_id: embedder.id });
  });

  it('answers 400 model_ambiguous for a name several of the caller\u2019s running deployments serve, as a call would', async () => {
    const { key } = await apiKey(owner, [chat.id, twin.id]);
    const error = await client(key).models.retrieve('qwen2.5-instruct').catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(BadRequestError);
    expect(refusal(error)).toEqual({ status: 400, code: 'model_ambiguous', param: 'model' });
    expect(await client(key).models.retrieve(twin.id)).toMatchObject({ id: twin.id });
    const session = await owner.api.GET('/v1/models/{model}', { params: { path: { model: 'qwen2.5-instruct' } } });
    expect(session.error).toMatchObject({ error: { code: 'model_ambiguous', param: 'model' } });
  });

  it('counts a retrieval under the key\u2019s requests per minute, as a listing', async () => {
    const { key } = await apiKey(owner, [chat.id], { limits: { requests_per_minute: 2 } });
    const api = keyClient(app.url, key);
    const first = await api.GET('/v1/models/{model}', { params: { path: { model: chat.id } } });
    expect(first.response.status).toBe(200);
    expect(first.response.headers.get('x-ratelimit-limit-requests')).toBe('2');
    expect(first.response.headers.get('x-ratelimit-remaining-requests')).toBe('1');
    expect((await api.GET('/v1/models')).response.status).toBe(200);
    const refused = await client(key).models.retrieve(chat.id).catch((failure: unknown) => failure);
    expect(refused).toBeInstanceOf(RateLimitError);
    expect(refusal(refused)).toMatchObject({ status: 429, code: 'rate_limit_exceeded' });
  });
});

describe('POST /v1/completions', () => {
  it('completes a prompt with a generate model, by deployment id or name, as one text_completion with usage', async () => {
    const { key } = await apiKey(owner, [code.id]);
    const before = stub.requestsTo(COMPLETIONS).length;
    const answer = await client(key).completions.create({ model: code.id, prompt: 'def add(a, b):', max_tokens: 5, temperature: 0.2, stop: ['\n\n'] });
    expect(answer).toMatchObject({ object: 'text_completion', choices: [{ index: 0, text: expect.stringMatching(/\S/), finish_reason: 'length' }] });
    expect(answer.usage).toMatchObject({ completion_tokens: 5, total_tokens: (answer.usage?.prompt_tokens ?? 0) + 5 });
    // By name, and the prompt as an array of one string, which the engine receives as the string.
    const byName = await client(key).completions.create({ model: CODE, prompt: ['def add(a, b):'], max_tokens: 5 });
    expect(byName).toMatchObject({ object: 'text_completion', choices: [{ text: expect.stringMatching(/\S/) }] });
    const sent = stub.requestsTo(COMPLETIONS).slice(before).map((request) => JSON.parse(request.body.toString('utf8')) as Record<string, unknown>);
    expect(sent).toHaveLength(2);
    expect(sent[1]).toMatchObject({ model: sent[0]?.model, prompt: 'def add(a, b):', max_tokens: 5 });
    expect(sent[0]?.model).not.toBe(code.id);
  });

  it('streams text_completion chunks that end with usage, and meters the tokens as chat: one usage record per request', async () => {
    const fresh = await apiKey(owner, [code.id]);
    const stream = await client(fresh.key).completions.create({ model: code.id, prompt: 'Once upon a time', max_tokens: 6, stream: true });
    const pieces: string[] = [];
    let streamed: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | undefined;
    for await (const chunk of stream) {
      expect(chunk.object).toBe('text_completion');
      pieces.push(...chunk.choices.map((choice) => choice.text));
      if (chunk.usage) streamed = chunk.usage;
    }
    expect(pieces.filter(Boolean).length).toBeGreaterThan(1);
    // Xinference ends a completion's stream without [DONE]: the proxy ends it as OpenAI's end.
    const other = await apiKey(owner, [code.id]);
    const raw = await fetch(`${app.url}/v1/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${other.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: CODE, prompt: 'Once upon a time', max_tokens: 3, stream: true }),
    });
    const events = (await raw.text()).split(/\r?\n\r?\n/).filter(Boolean);
    expect(events.at(-1)).toBe('data: [DONE]');
    expect(events.filter((event) => event === 'data: [DONE]')).toHaveLength(1);
    expect(events.slice(0, -1).every((event) => (JSON.parse(event.slice('data: '.length)) as { model: string }).model === CODE)).toBe(true);
    // The client did not ask for usage: the proxy did, for metering.
    expect(streamed?.completion_tokens).toBe(6);
    const sent = JSON.parse(stub.requestsTo(COMPLETIONS).at(-1)?.body.toString('utf8') ?? '{}') as Record<string, unknown>;
    expect(sent).toMatchObject({ stream: true, stream_options: { include_usage: true } });

    const whole = await client(fresh.key).completions.create({ model: CODE, prompt: 'Once upon a time', max_tokens: 3 });
    await app.container.usage.flush();
    const rows = await app.db('usage_records').where({ api_key_id: fresh.id }).orderBy('id');
    expect(rows.map((row) => ({ route: row.route, model: row.model, deployment_id: row.deployment_id, unit: row.unit, outcome: row.outcome, estimated: row.estimated }))).toEqual([
      { route: '/v1/completions', model: CODE, deployment_id: code.id, unit: 'token', outcome: 'completed', estimated: false },
      { route: '/v1/completions', model: CODE, deployment_id: code.id, unit: 'token', outcome: 'completed', estimated: false },
    ]);
    expect(rows.map((row) => Number(row.total_tokens))).toEqual([streamed?.total_tokens, whole.usage?.total_tokens]);
  });

  it('refuses a model without the generate ability (a chat or embedding deployment, a hosted chat model) with 400 unsupported_value, before the engine', async () => {
    const { key } = await apiKey(owner, [chat.id, embedder.id]);
    const hostedOnly = await apiKey(owner, [embedder.id], { allow_hosted_models: true });
    const before = engineCompletions();
    for (const [caller, model] of [
      [key, chat.id],
      [key, 'qwen2.5-instruct'],
      [key, embedder.id],
      [hostedOnly.key, HOSTED],
    ] as const) {
      const error = await client(caller).completions.create({ model, prompt: 'def add(a, b):' }).catch((failure: unknown) => failure);
      expect(error, model).toBeInstanceOf(BadRequestError);
      expect(refusal(error), model).toEqual({ status: 400, code: 'unsupported_value', param: 'model' });
      expect((error as Error).message, model).toContain('/v1/chat/completions');
    }
    expect(engineCompletions()).toBe(before);
  });

  it('refuses chat to a generate-only model with 400 unsupported_value pointing to completions, before the engine', async () => {
    const { key } = await apiKey(owner, [code.id]);
    const before = stub.requestsTo(CHAT).length;
    const error = await client(key)
      .chat.completions.create({ model: CODE, messages: [{ role: 'user', content: 'hi' }] })
      .catch((failure: unknown) => failure);
    expect(refusal(error)).toEqual({ status: 400, code: 'unsupported_value', param: 'model' });
    expect((error as Error).message).toContain('/v1/completions');
    expect(stub.requestsTo(CHAT)).toHaveLength(before);
  });

  it('passes the engine’s refusal of tools (a family without a tool-call parser) as 400 unsupported_parameter on `tools`', async () => {
    const { key } = await apiKey(owner, [chat.id]);
    // Xinference lists every family that can call tools; the client gets a sentence instead.
    stub.behave(CHAT, (req: IncomingMessage, res: ServerResponse) => {
      req.resume();
      req.once('end', () => {
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ detail: `Only {'qwen2.5-instruct', 'qwen3', ${"'x', ".repeat(60)}'llama-3.1-instruct'} support tool calls` }));
      });
    });
    try {
      const tools = [{ type: 'function' as const, function: { name: 'weather', parameters: { type: 'object', properties: {} } } }];
      const error = await client(key)
        .chat.completions.create({ model: chat.id, messages: [{ role: 'user', content: 'hi' }], tools })
        .catch((failure: unknown) => failure);
      expect(refusal(error)).toEqual({ status: 400, code: 'unsupported_parameter', param: 'tools' });
      expect((error as Error).message).toContain('cannot call tools');
    } finally {
      stub.behave(CHAT, undefined);
    }
  });

  it('refuses what the engine would not honour (several prompts, n or best_of over 1, echo, logit_bias) before the engine', async () => {
    const { key } = await apiKey(owner, [code.id]);
    const before = engineCompletions();
    const cases: Array<[Record<string, unknown>, string, string]> = [
      [{ prompt: ['one', 'two'] }, 'unsupported_value', 'prompt'],
      [{ n: 2 }, 'unsupported_value', 'n'],
      [{ best_of: 3 }, 'unsupported_value', 'best_of'],
      [{ echo: true }, 'unsupported_value', 'echo'],
      [{ logit_bias: { '50256': -100 } }, 'unsupported_parameter', 'logit_bias'],
      [{ suffix: '}' }, 'unsupported_parameter', 'suffix'],
    ];
    for (const [fields, code, param] of cases) {
      const error = await client(key)
        .completions.create({ model: CODE, prompt: 'x', ...fields } as never)
        .catch((failure: unknown) => failure);
      expect(refusal(error), JSON.stringify(fields)).toEqual({ status: 400, code, param });
    }
    // The values that are served pass: n and best_of 1, echo false, logit_bias null.
    const served = await client(key).completions.create({ model: CODE, prompt: 'x', n: 1, best_of: 1, echo: false, logit_bias: null, max_tokens: 2 });
    expect(served.choices).toHaveLength(1);
    expect(engineCompletions()).toBe(before + 1);
  });

  it('reserves max_tokens against the key\u2019s budget while the completion runs, as chat reserves max_completion_tokens', async () => {
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    stub.behave(COMPLETIONS, (req: IncomingMessage, res: ServerResponse) => {
      req.resume();
      void held.then(() => {
        res.writeHead(200, { 'content-type': 'application/json' });
        const usage = { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 };
        res.end(JSON.stringify({ id: 'cmpl-1', object: 'text_completion', created: 1, model: 'm', choices: [{ text: 'x', index: 0, logprobs: null, finish_reason: 'length' }], usage }));
      });
    });
    const arrived = stub.requestsTo(COMPLETIONS).length;
    const engineHolds = (count: number) => waitUntil(async () => stub.requestsTo(COMPLETIONS).length === arrived + count, `the engine to hold ${count} completions`);
    const call = (key: string, maxTokens: number) =>
      client(key)
        .completions.create({ model: code.id, prompt: 'x', max_tokens: maxTokens })
        .then(
          () => 'answered',
          (error: unknown) => refusal(error).code,
        );
    try {
      // Two keys with a budget of 5,000 tokens: one runs a completion that may use 4,990 of them, the other one that may use 10.
      const large = await apiKey(owner, [code.id], { limits: { monthly_token_budget: 5000 } });
      const small = await apiKey(owner, [code.id], { limits: { monthly_token_budget: 5000 } });
      const running = [call(large.key, 4990), call(small.key, 10)];
      await engineHolds(2);
      // While they run, nothing else fits the first key's budget (a request admitted would reach the engine); the second has room.
      expect(await Promise.race([call(large.key, 1), engineHolds(3).then(() => 'reached the engine')])).toBe('insufficient_quota');
      running.push(call(small.key, 1));
      await engineHolds(3);
      release();
      expect(await Promise.all(running)).toEqual(['answered', 'answered', 'answered']);
      // Once it ended, what it used (8 tokens) replaced its reservation.
      expect(await call(large.key, 1)).toBe('answered');
    } finally {
      stub.behave(COMPLETIONS, undefined);
      release();
    }
  });
});

describe('unknown URLs under /v1/', () => {
  const unknownUrl = (method: string, path: string) => ({
    error: {
      message: `Unknown request URL: ${method} ${path}. Please check the URL for typos, or see the API reference at /docs.`,
      type: 'invalid_request_error',
      param: null,
      code: 'unknown_url',
    },
  });

  it.each([
    ['POST', '/v1/responses'],
    ['POST', '/v1/audio/speech'],
    ['POST', '/v1/moderations'],
    ['GET', '/v1/files'],
    ['POST', '/v1/completions/extra'],
    ['GET', '/v1/chat/completions'],
    ['DELETE', '/v1/models/some-model'],
    ['GET', '/v1/organization/no-such-thing'],
    ['GET', '/v1'],
  ])('answer %s %s with OpenAI\u2019s 404 unknown_url, with or without a key', async (method, path) => {
    const { key } = await apiKey(owner, [chat.id]);
    for (const headers of [{ authorization: `Bearer ${key}` }, {}]) {
      const response = await fetch(`${app.url}${path}?q=1`, { method, headers: { ...headers, 'content-type': 'application/json' }, ...(method === 'POST' ? { body: '{"model":"x"}' } : {}) });
      expect(response.status).toBe(404);
      expect(response.headers.get('x-request-id')).toMatch(/^req_/);
      expect(await jsonOf(response)).toEqual(unknownUrl(method, path));
    }
  });

  it('reach the openai client as a typed NotFoundError with the message, not "404 status code (no body)"', async () => {
    const { key } = await apiKey(owner, [chat.id]);
    const speech = await client(key)
      .audio.speech.create({ model: 'kokoro', voice: 'alloy', input: 'hello' })
      .catch((failure: unknown) => failure);
    expect(speech).toBeInstanceOf(NotFoundError);
    expect(speech).toMatchObject({ status: 404, code: 'unknown_url', type: 'invalid_request_error' });
    expect((speech as Error).message).toBe('404 Unknown request URL: POST /v1/audio/speech. Please check the URL for typos, or see the API reference at /docs.');
    const responses = await client(key)
      .responses.create({ model: chat.id, input: 'hi' })
      .catch((failure: unknown) => failure);
    expect(responses).toMatchObject({ status: 404, code: 'unknown_url' });
  });

  it('leave the management API\u2019s own answers in Problem: a 404 and a 405 of its paths under /v1/, and any path outside /v1/', async () => {
    const problem = async (response: Response, status: number, code: string) => {
      expect(response.status).toBe(status);
      expect(await jsonOf<Problem>(response)).toMatchObject({ status, code, request_id: response.headers.get('x-request-id') });
    };
    const missing = await owner.api.GET('/v1/organization/webhook-endpoints/{webhook_endpoint_id}', { params: { path: { webhook_endpoint_id: '0192f1c6-2b9e-7c4e-9b1a-5d0c8e6f7a21' } } });
    expect(missing.response.status).toBe(404);
    expect(missing.error).toMatchObject({ status: 404, code: 'NOT_FOUND' });
    const wrongMethod = await fetch(`${app.url}/v1/organization/members`, { method: 'PUT' });
    await problem(wrongMethod, 405, 'METHOD_NOT_ALLOWED');
    expect(wrongMethod.headers.get('allow')).toBe('GET');
    await problem(await fetch(`${app.url}/api/v1/responses`, { method: 'POST' }), 404, 'NOT_FOUND');
    await problem(await fetch(`${app.url}/responses`), 404, 'NOT_FOUND');
  });
});
