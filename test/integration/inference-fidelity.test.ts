import type OpenAI from 'openai';
import { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { LOCAL_CLUSTER_NAME } from '../../dev/local-cluster.ts';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment, type Deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { keyClient, type Api } from '../helpers/browser.ts';
import { contractFetch } from '../helpers/contract.ts';
import { EngineStub, type EngineBehaviour } from '../helpers/engine-stub.ts';
import { jsonOf } from '../helpers/http.ts';
import { inferenceClient } from '../helpers/inference-client.ts';
import { waitUntil } from '../helpers/net.ts';

/**
 * The promises of the inference contract that the serving engine does not keep by itself
 * (../shared/reviews/xinference-fidelity-d37b28c.md, M4, M6, M10, M12, M13, M14), kept by the
 * proxy on top of the cluster simulator, which answers as Xinference 3.x does (the conformance
 * suite in test/engine/ checks that against a real cluster). An engine stub sits in front of the
 * simulator, to see what reached the engine and to make it answer 429.
 */

type CreateChatCompletionRequest = components['schemas']['CreateChatCompletionRequest'];

let app: TestApp;
let stub: EngineStub;
let owner: SignedInUser;
let chat: Deployment;
let embedder: Deployment;
let whisper: Deployment;
let painter: Deployment;
let key: string;

const CHAT = 'POST /v1/chat/completions';
const client = () => inferenceClient(app, key);
/** The typed client with the API key. */
const api = (): Api => keyClient(app.url, key);
const chatCompletion = (body: CreateChatCompletionRequest) => api().POST('/v1/chat/completions', { body });
const audio = Buffer.alloc(32_000, 1);
const hello = [{ role: 'user' as const, content: 'hello there' }];

/** A multipart form, which the typed client does not send: fetch, its answer checked against the document. */
function transcribe(responseFormat?: string) {
  const form = new FormData();
  form.set('model', whisper.id);
  form.set('file', new Blob([audio], { type: 'audio/wav' }), 'a.wav');
  if (responseFormat) form.set('response_format', responseFormat);
  return contractFetch(app.url)(`${app.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form });
}

/** Requests that reached the engine's inference routes. */
const inferenceCalls = () => stub.recorded.filter((r) => /^\/v1\/(chat\/|embeddings$|rerank$|images\/|audio\/)/.test(r.path)).length;

/** The JSON body of the last request that reached `route` on the engine. */
const lastSent = (route: string) => JSON.parse(stub.requestsTo(route).at(-1)?.body.toString('utf8') ?? '{}') as Record<string, unknown>;

const answers =
  (status: number, body: unknown, headers: Record<string, string> = {}): EngineBehaviour =>
  (req, res) => {
    req.resume();
    req.once('end', () => {
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify(body));
    });
  };

async function usageRows(where: Record<string, unknown>) {
  await app.container.usage.flush();
  return app.db('usage_records').where(where).orderBy('id');
}

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' }, { workers: true, cluster: { modelLoadMs: 100, tokenLatencyMs: 1 } });
  stub = await EngineStub.inFrontOf(app);
  owner = await registeredUser(app);
  [chat, embedder, whisper, painter] = await Promise.all([
    deployment(app, owner, 'running', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 }),
    deployment(app, owner, 'running', { model_name: 'bge-m3' }),
    deployment(app, owner, 'running', { model_name: 'whisper-large-v3' }),
    deployment(app, owner, 'running', { model_name: 'FLUX.1-schnell' }),
  ]);
  key = (await apiKey(owner, [chat.id, embedder.id, whisper.id, painter.id], { name: 'fidelity' })).key;
}, 120_000);

afterAll(async () => {
  await app.close();
  await stub.stop();
});

describe('images (M4)', () => {
  it('answers the default url as a data URL of the engine’s JPEG, never a path on the worker’s disk', async () => {
    const images = await client().images.generate({ model: painter.id, prompt: 'a lighthouse at dawn', n: 2 });
    expect(lastSent('POST /v1/images/generations')).toMatchObject({ response_format: 'b64_json', model: painter.engine_model_uid });
    expect(images.data).toHaveLength(2);
    for (const image of images.data ?? []) {
      expect(Object.keys(image)).toEqual(['url']);
      const [, media, base64] = /^data:([^;]+);base64,(.+)$/.exec(image.url ?? '') ?? [];
      expect(media).toBe('image/jpeg');
      expect(Buffer.from(base64 ?? '', 'base64').subarray(0, 3)).toEqual(Buffer.from([0xff, 0xd8, 0xff]));
    }
  });

  it('answers b64_json as the bare base64 of the same image, without a url', async () => {
    const images = await client().images.generate({ model: painter.id, prompt: 'a lighthouse at dawn', response_format: 'b64_json' });
    const [image] = images.data ?? [];
    expect(Object.keys(image ?? {})).toEqual(['b64_json']);
    expect(Buffer.from(image?.b64_json ?? '', 'base64').subarray(0, 3)).toEqual(Buffer.from([0xff, 0xd8, 0xff]));
  });

  it('labels a PNG (an image with transparency) image/png, and drops a worker path the engine sent anyway', async () => {
    const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, 0x49, 0x48, 0x44, 0x52]).toString('base64');
    stub.behave('POST /v1/images/generations', answers(200, { created: 1, data: [{ url: '/root/.xinference/image/0a1b.png', b64_json: png }] }));
    const { data } = await api().POST('/v1/images/generations', { body: { model: painter.id, prompt: 'glass' } });
    stub.behave('POST /v1/images/generations', undefined);
    expect(data).toEqual({ created: 1, data: [{ url: `data:image/png;base64,${png}` }] });
  });
});

describe('transcriptions (M6, M14)', () => {
  const text = `Simulated transcription of ${audio.length} bytes of audio.`;

  it('renders text from the engine’s json, as text/plain', async () => {
    const response = await transcribe('text');
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(await response.text()).toBe(`${text}\n`);
    expect(stub.requestsTo('POST /v1/audio/transcriptions').at(-1)?.body.toString('latin1')).toContain('name="response_format"\r\n\r\njson\r\n');
  });

  it('renders srt and vtt from the segments of the engine’s verbose_json', async () => {
    // The simulator's Whisper: two segments of four and three words over 2 s of audio (16 kB/s).
    const srt = await transcribe('srt');
    expect(srt.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(await srt.text()).toBe('1\n00:00:00,000 --> 00:00:01,000\nSimulated transcription of 32000\n\n2\n00:00:01,000 --> 00:00:02,000\nbytes of audio.\n\n');
    expect(stub.requestsTo('POST /v1/audio/transcriptions').at(-1)?.body.toString('latin1')).toContain('name="response_format"\r\n\r\nverbose_json\r\n');
    const vtt = await transcribe('vtt');
    expect(await vtt.text()).toBe('WEBVTT\n\n00:00:00.000 --> 00:00:01.000\nSimulated transcription of 32000\n\n00:00:01.000 --> 00:00:02.000\nbytes of audio.\n\n');
  });

  it('answers 502 when the engine’s answer holds no transcript to render', async () => {
    stub.behave('POST /v1/audio/transcriptions', answers(200, { segments: 'not a transcript' }));
    const response = await transcribe('srt');
    stub.behave('POST /v1/audio/transcriptions', undefined);
    expect(response.status).toBe(502);
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await jsonOf(response)).toEqual({ error: { message: 'The model answered in a form this route does not serve.', type: 'server_error', code: 'upstream_error', param: null } });
  });

  it('serves every format to the official openai client, and meters each transcription as one request', async () => {
    const fresh = await apiKey(owner, [whisper.id], { name: 'formats' });
    const sdk = inferenceClient(app, fresh.key);
    const file = async () => toFile(audio, 'a.wav');
    expect((await sdk.audio.transcriptions.create({ file: await file(), model: whisper.id })).text).toBe(text);
    expect(await sdk.audio.transcriptions.create({ file: await file(), model: whisper.id, response_format: 'text' })).toBe(`${text}\n`);
    expect(await sdk.audio.transcriptions.create({ file: await file(), model: whisper.id, response_format: 'vtt' })).toMatch(/^WEBVTT\n\n00:00:00\.000 --> /);
    const verbose = await sdk.audio.transcriptions.create({ file: await file(), model: whisper.id, response_format: 'verbose_json' });
    expect(verbose).toMatchObject({ text, duration: 2, segments: [{ start: 0, end: 1 }, { start: 1, end: 2 }] });
    const rows = await usageRows({ api_key_id: fresh.id });
    expect(rows.map((row) => [row.route, row.unit, Number(row.quantity), row.outcome])).toEqual(Array.from({ length: 4 }, () => ['/v1/audio/transcriptions', 'request', 1, 'completed']));
  });
});

describe('chat parameters the engine does not honour (M12)', () => {
  it('refuses any logit_bias and an n other than 1 with 400 before calling the engine; n 1 and a null logit_bias pass', async () => {
    const before = stub.requestsTo(CHAT).length;
    const refusal = async (params: Record<string, unknown>) => {
      const error = (await client()
        .chat.completions.create({ model: chat.id, messages: hello, ...params })
        .catch((failure: unknown) => failure)) as InstanceType<typeof OpenAI.APIError>;
      return { status: error.status, code: error.code, param: error.param };
    };
    expect(await refusal({ logit_bias: {} })).toEqual({ status: 400, code: 'unsupported_parameter', param: 'logit_bias' });
    expect(await refusal({ logit_bias: { '50256': -100 }, stream: true })).toEqual({ status: 400, code: 'unsupported_parameter', param: 'logit_bias' });
    expect(await refusal({ n: 2 })).toEqual({ status: 400, code: 'unsupported_value', param: 'n' });
    expect(stub.requestsTo(CHAT).length).toBe(before);
    const served = await client().chat.completions.create({ model: chat.id, messages: hello, n: 1, logit_bias: null });
    expect(served.choices).toHaveLength(1);
  });
});

describe('request validation on the inference routes', () => {
  it('checks the body against the document before calling the engine', async () => {
    const before = stub.requestsTo(CHAT).length;
    const refusal = async (params: Record<string, unknown>) => {
      const error = (await client()
        .chat.completions.create({ model: chat.id, messages: hello, ...params } as never)
        .catch((failure: unknown) => failure)) as InstanceType<typeof OpenAI.APIError>;
      return { status: error.status, code: error.code, param: error.param };
    };
    expect(await refusal({ messages: undefined })).toEqual({ status: 400, code: 'missing_required_parameter', param: 'messages' });
    expect(await refusal({ temperature: 'hot' })).toEqual({ status: 400, code: 'invalid_parameter', param: 'temperature' });
    expect(stub.requestsTo(CHAT).length).toBe(before);
    const served = await client().chat.completions.create({ model: chat.id, messages: hello, temperature: 0.5 });
    expect(served.choices).toHaveLength(1);
    expect(JSON.parse(String(stub.requestsTo(CHAT).at(-1)?.body)).temperature).toBe(0.5);
  });

  it('sends the engine the headers of an HTTP/1.1 client: Host (uvicorn refuses a request without it), the length and type of the body, the route\'s Accept (never the client\'s)', async () => {
    await client().chat.completions.create({ model: chat.id, messages: hello }, { headers: { accept: 'text/html, application/json;q=0.9' } });
    const sent = stub.requestsTo(CHAT).at(-1);
    expect(sent?.headers).toEqual(
      expect.objectContaining({ host: new URL(stub.url).host, 'content-type': 'application/json', 'content-length': String(sent?.body.length), accept: 'application/json, text/event-stream', connection: 'keep-alive' }),
    );
  });
});

describe('embeddings as base64 (M13)', () => {
  it('encodes the engine’s floats as little-endian float32 for the official openai client, which asks for base64 by default', async () => {
    const floats = await client().embeddings.create({ model: embedder.id, input: ['first', 'second'], encoding_format: 'float' });
    const byDefault = await client().embeddings.create({ model: embedder.id, input: ['first', 'second'] });
    expect(lastSent('POST /v1/embeddings')).not.toHaveProperty('encoding_format');
    expect(byDefault.data).toHaveLength(2);
    for (const [i, item] of byDefault.data.entries()) {
      const expected = (floats.data[i]?.embedding ?? []).map((value) => Math.fround(value));
      expect(Array.from(item.embedding)).toEqual(expected);
    }
    expect(byDefault.usage).toEqual(floats.usage);
  });

  it('answers base64 strings on the wire', async () => {
    const { data: body } = await api().POST('/v1/embeddings', { body: { model: embedder.id, input: 'one', encoding_format: 'base64' } });
    expect(typeof body?.data[0]?.embedding).toBe('string');
    expect(Buffer.from(body?.data[0]?.embedding as string, 'base64').length).toBe(384 * 4);
  });
});

describe('the model name asked for', () => {
  it('answers chat, every chunk of a stream and embeddings with the name the caller sent, never the engine’s uid', async () => {
    for (const model of [chat.id, 'qwen2.5-instruct']) {
      const answer = await client().chat.completions.create({ model, messages: hello, max_tokens: 3 });
      expect(lastSent(CHAT).model).toBe(chat.engine_model_uid);
      expect(answer.model).toBe(model);
      const chunks = [];
      for await (const chunk of await client().chat.completions.create({ model, messages: hello, max_tokens: 3, stream: true })) chunks.push(chunk);
      expect(chunks.length).toBeGreaterThan(2);
      expect(new Set(chunks.map((chunk) => chunk.model))).toEqual(new Set([model]));
    }
    for (const encoding_format of ['float', 'base64'] as const) {
      const { data: body, response } = await api().POST('/v1/embeddings', { body: { model: 'bge-m3', input: 'one', encoding_format } });
      expect(response.status).toBe(200);
      expect(body?.model).toBe('bge-m3');
    }
  });

  it('keeps the uid where the model wrote it in its text: only the engine’s own `model` token is renamed', async () => {
    const uid = chat.engine_model_uid ?? '';
    const content = `I am "${uid}" and ${uid}`;
    stub.behave(CHAT, answers(200, { id: 'chatcmpl-1', object: 'chat.completion', created: 1, model: uid, choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }], usage: { prompt_tokens: 2, completion_tokens: 9, total_tokens: 11 } }));
    try {
      const answer = await client().chat.completions.create({ model: chat.id, messages: hello });
      expect(answer.model).toBe(chat.id);
      expect(answer.choices[0]?.message.content).toBe(content);
    } finally {
      stub.behave(CHAT, undefined);
    }
  });
});

describe('engine refusals (M10)', () => {
  it('passes an engine 429 through with Retry-After, the engine’s when it sent one', async () => {
    const limit = { detail: `Rate limit reached for the model. Request limit 4 for the model: ${chat.engine_model_uid}` };
    const cases: Array<[EngineBehaviour, string]> = [
      [answers(429, limit), '5'],
      [answers(429, limit, { 'retry-after': '7' }), '7'],
      [answers(429, { detail: 'Too many failed attempts. IP temporarily banned.' }), '60'],
    ];
    for (const [behaviour, retryAfter] of cases) {
      stub.behave(CHAT, behaviour);
      const { error, response } = await chatCompletion({ model: chat.id, messages: hello });
      stub.behave(CHAT, undefined);
      expect(response.status).toBe(429);
      expect(response.headers.get('retry-after')).toBe(retryAfter);
      const text = JSON.stringify(error);
      expect(error).toEqual({
        error: { message: 'The model is receiving too many requests; retry after Retry-After seconds.', type: 'rate_limit_error', code: 'engine_rate_limited', param: null },
      });
      expect(text).not.toContain('dep-');
    }
  });

  it('stops calling a cluster whose engine refused the inference key: one 502, then 503 engine_unavailable without a call, until an operator checks it again', async () => {
    const simulator = app.simulator;
    const auth = simulator?.auth;
    const apiKey = simulator?.credentials?.apiKey;
    if (!auth || !apiKey) throw new Error('the simulator runs with authentication');
    auth.deleteApiKey(apiKey);
    const invalidBefore = auth.invalidBearers;
    const callsBefore = inferenceCalls();

    const first = await chatCompletion({ model: chat.id, messages: hello });
    expect(first.response.status).toBe(502);
    expect(first.error).toMatchObject({ error: { code: 'upstream_error', type: 'server_error' } });
    await waitUntil(async () => (await app.db('clusters').where({ name: LOCAL_CLUSTER_NAME }).first()).status === 'credentials_invalid', 'the cluster to be marked');
    const cluster = await app.db('clusters').where({ name: LOCAL_CLUSTER_NAME }).first();
    expect(cluster.status_reason).toMatch(/inference API key/);

    for (const refused of [
      await chatCompletion({ model: chat.id, messages: hello }),
      await api().POST('/v1/embeddings', { body: { model: embedder.id, input: 'x' } }),
      await chatCompletion({ model: 'qwen2.5-instruct', messages: hello, stream: true }),
    ]) {
      expect(refused.response.status).toBe(503);
      expect(refused.response.headers.get('retry-after')).toBe('60');
      expect(refused.error).toMatchObject({ error: { code: 'engine_unavailable', type: 'server_error', param: 'model' } });
    }
    // One refused bearer reached the engine, toward its ban of the platform's address; no more.
    expect(auth.invalidBearers - invalidBefore).toBe(1);
    expect(inferenceCalls() - callsBefore).toBe(1);
    expect(auth.bannedAddresses()).toEqual([]);

    auth.addApiKey(apiKey, 'admin');
    await app.container.clusters.check(LOCAL_CLUSTER_NAME);
    await waitUntil(async () => (await chatCompletion({ model: chat.id, messages: hello })).response.status === 200, 'the cluster to serve again');
  });

  it('treats an engine 403 to the inference key (a key without the scope the route needs) the same way', async () => {
    stub.behave(CHAT, answers(403, { detail: 'API keys can only access model query and inference endpoints' }));
    const refused = await chatCompletion({ model: chat.id, messages: hello });
    stub.behave(CHAT, undefined);
    expect(refused.response.status).toBe(502);
    expect(JSON.stringify(refused.error)).not.toContain('dep-');
    const next = await chatCompletion({ model: chat.id, messages: hello });
    expect(next.response.status).toBe(503);
    expect(next.error).toMatchObject({ error: { code: 'engine_unavailable' } });
    // The mark is written in the background (retried until written); this process stopped calling at once.
    await waitUntil(async () => /answered 403/.test((await app.db('clusters').where({ name: LOCAL_CLUSTER_NAME }).first()).status_reason ?? ''), 'the cluster to be marked');
    await app.container.clusters.check(LOCAL_CLUSTER_NAME);
    await waitUntil(async () => (await chatCompletion({ model: chat.id, messages: hello })).response.status === 200, 'the cluster to serve again');
  });
});
