import { request, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type OpenAI from 'openai';
import { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { generateKey } from '../../src/api-keys/key-format.ts';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment, type Deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser, keyClient } from '../helpers/browser.ts';
import { checkResponse, contractFetch } from '../helpers/contract.ts';
import { EngineStub, type EngineBehaviour } from '../helpers/engine-stub.ts';
import { jsonOf } from '../helpers/http.ts';
import { inferenceClient } from '../helpers/inference-client.ts';
import { peakLiveGrowth } from '../helpers/memory.ts';
import { waitUntil } from '../helpers/net.ts';

/**
 * The attacks of the data-plane security review (shared/reviews/security-dataplane-d37b28c.md), each
 * reproduced through the HTTP interface. The cluster's endpoint is an engine stub in front of the
 * simulator, so a test can make the engine misbehave and see what reached it.
 */

type CreateChatCompletionRequest = components['schemas']['CreateChatCompletionRequest'];

let app: TestApp;
let stub: EngineStub;
let acme: SignedInUser;
let bravo: SignedInUser;
let chat: Deployment;
let whisper: Deployment;
let reranker: Deployment;
let painter: Deployment;
let bravoWhisper: Deployment;
/** Acme's key scoped to its LLM only. */
let chatOnlyKey: string;
/** Acme's key scoped to all of Acme's deployments. */
let acmeKey: string;
let bravoKey: string;

const CHAT = 'POST /v1/chat/completions';
const TRANSCRIPTIONS = 'POST /v1/audio/transcriptions';
const MiB = 1024 * 1024;

const client = (key: string) => inferenceClient(app, key);

type FormPart = { name: string; value: string } | { name: string; filename: string; data: Buffer; type?: string };

function multipart(boundary: string, parts: FormPart[], preamble = ''): Buffer {
  const chunks: Buffer[] = [Buffer.from(preamble)];
  for (const part of parts) {
    if ('value' in part) {
      chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${part.name}"\r\n\r\n${part.value}\r\n`));
    } else {
      chunks.push(
        Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${part.name}"; filename="${part.filename}"\r\nContent-Type: ${part.type ?? 'audio/wav'}\r\n\r\n`),
        part.data,
        Buffer.from('\r\n'),
      );
    }
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return Buffer.concat(chunks);
}

/** A multipart body as bytes, which the typed client cannot send: fetch, its answer checked against the document. */
function transcribe(apiKey: string, boundary: string, body: Buffer, headers: Record<string, string> = {}) {
  return contractFetch(app.url)(`${app.url}/v1/audio/transcriptions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': `multipart/form-data; boundary=${boundary}`, ...headers },
    body,
    duplex: 'half',
  } as RequestInit);
}

/**
 * A multipart body streamed over node:http, one chunk in flight at a time, its answer checked
 * against the document. Not fetch: undici keeps every chunk of a streamed request body until the
 * answer (nodejs/undici#4058), so a memory check through fetch measures the client (48 MB seen under
 * the suite's load, the file twice over).
 */
async function streamedTranscription(apiKey: string, boundary: string, body: AsyncIterable<Buffer>): Promise<Response> {
  const req = request(`${app.url}/v1/audio/transcriptions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
  });
  const answered = new Promise<IncomingMessage>((resolve) => req.once('response', resolve));
  await pipeline(Readable.from(body, { objectMode: false, highWaterMark: 1 }), req);
  const res = await answered;
  const chunks: Buffer[] = [];
  for await (const chunk of res) chunks.push(chunk as Buffer);
  const headers = Object.entries(res.headers).flatMap(([name, value]) => (typeof value === 'string' ? [[name, value] as [string, string]] : []));
  const response = new Response(Buffer.concat(chunks), { status: res.statusCode, headers });
  await checkResponse('POST', '/v1/audio/transcriptions', response);
  return response;
}

/** A chat completion with an API key, through the typed client. */
const chatAs = (key: string, body: CreateChatCompletionRequest, headers: Record<string, string> = {}) =>
  keyClient(app.url, key).POST('/v1/chat/completions', { body, headers });

const audio = Buffer.alloc(3000, 1);
const hello = { role: 'user' as const, content: 'hello there' };

/** An engine that drains the request and answers `status` with `body` as `contentType`. */
const answers =
  (status: number, contentType: string, body: string, headers: Record<string, string> = {}): EngineBehaviour =>
  (req, res) => {
    req.resume();
    req.once('end', () => {
      res.writeHead(status, { 'content-type': contentType, ...headers });
      res.end(body);
    });
  };

async function usageRows(where: Record<string, unknown>) {
  await app.container.usage.flush();
  return app.db('usage_records').where(where).orderBy('id');
}

beforeAll(async () => {
  app = await startTestApp(
    { ...FAST_PROVISIONING, TRUST_PROXY: 'true', INFERENCE_IDLE_TIMEOUT_SECONDS: '1', INFERENCE_FIRST_BYTE_TIMEOUT_SECONDS: '4', MAX_ACTIVE_RESOURCES: '50' },
    { workers: true, cluster: { modelLoadMs: 100, tokenLatencyMs: 5 } },
  );
  stub = await EngineStub.inFrontOf(app);
  acme = await registeredUser(app);
  bravo = await registeredUser(app);
  [chat, whisper, reranker, painter, bravoWhisper] = await Promise.all([
    deployment(app, acme, 'running', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 }),
    deployment(app, acme, 'running', { model_name: 'whisper-large-v3' }),
    deployment(app, acme, 'running', { model_name: 'bge-reranker-v2-m3' }),
    deployment(app, acme, 'running', { model_name: 'FLUX.1-schnell' }),
    deployment(app, bravo, 'running', { model_name: 'whisper-large-v3' }),
  ]);
  chatOnlyKey = (await apiKey(acme, [chat.id])).key;
  acmeKey = (await apiKey(acme, [chat.id, whisper.id, reranker.id, painter.id])).key;
  bravoKey = (await apiKey(bravo, [bravoWhisper.id])).key;
}, 120_000);

afterAll(async () => {
  await app.close();
  await stub.stop();
});

describe('transcription uploads are parsed, checked and rebuilt', () => {
  const engineCalls = () => stub.requestsTo(TRANSCRIPTIONS).length;

  it('refuses a second model part with 400 and never calls the engine', async () => {
    const before = engineCalls();
    for (const smuggled of [bravoWhisper.engine_model_uid ?? '', bravoWhisper.id, 'x']) {
      const body = multipart('B', [{ name: 'model', value: chat.id }, { name: 'model', value: smuggled }, { name: 'file', filename: 'a.wav', data: audio }]);
      const response = await transcribe(chatOnlyKey, 'B', body);
      expect(response.status).toBe(400);
      expect(await jsonOf(response)).toEqual({ error: { message: '`model` may be sent only once.', type: 'invalid_request_error', code: 'invalid_parameter', param: 'model' } });
    }
    expect(engineCalls()).toBe(before);
  });

  it('ignores a preamble that looks like a model part: only the parsed part routes', async () => {
    const before = engineCalls();
    const preamble = `Content-Disposition: form-data; name="model"\r\n\r\n${chat.id}\r\n`;
    const body = multipart('B', [{ name: 'model', value: bravoWhisper.engine_model_uid ?? '' }, { name: 'file', filename: 'a.wav', data: audio }], preamble);
    const response = await transcribe(chatOnlyKey, 'B', body);
    expect(response.status).toBe(404);
    expect(await jsonOf(response)).toMatchObject({ error: { code: 'model_not_found', param: 'model' } });
    expect(engineCalls()).toBe(before);
  });

  it('refuses a part named other than the documented fields, and a file part not named file', async () => {
    const before = engineCalls();
    const tricks: FormPart[][] = [
      // The old byte search read `filename="model"` as the model part.
      [{ name: 'upload', filename: 'model', data: Buffer.from(chat.id), type: 'text/plain' }, { name: 'model', value: bravoWhisper.engine_model_uid ?? '' }],
      [{ name: 'model', filename: 'model', data: Buffer.from(bravoWhisper.engine_model_uid ?? ''), type: 'text/plain' }],
      [{ name: 'model', value: chat.id }, { name: 'stream', value: 'true' }],
      [{ name: 'model', value: chat.id }, { name: 'file', value: 'not a file' }],
    ];
    for (const parts of tricks) {
      const response = await transcribe(chatOnlyKey, 'B', multipart('B', [...parts, { name: 'file', filename: 'a.wav', data: audio }]));
      expect(response.status).toBe(400);
      expect(await jsonOf(response)).toMatchObject({ error: { type: 'invalid_request_error', code: 'invalid_parameter' } });
    }
    expect(engineCalls()).toBe(before);
  });

  it('sends the engine a form rebuilt from the checked parts: one model part, the engine uid, no client headers', async () => {
    const before = engineCalls();
    const body = multipart('B', [
      { name: 'model', value: whisper.id },
      { name: 'file', filename: '../../etc/a b;.wav', data: audio },
      { name: 'language', value: 'en' },
      { name: 'response_format', value: 'text' },
    ]);
    const response = await transcribe(acmeKey, 'B', body, { cookie: 'session=abc', 'x-forwarded-for': '203.0.113.50' });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(await response.text()).toBe('Simulated transcription of 3000 bytes of audio.\n');
    expect(engineCalls()).toBe(before + 1);
    const sent = stub.requestsTo(TRANSCRIPTIONS).at(-1);
    const text = sent?.body.toString('latin1') ?? '';
    expect(text.match(/name="model"/g)).toHaveLength(1);
    expect(text).toContain(`name="model"\r\n\r\n${whisper.engine_model_uid}\r\n`);
    expect(text).toContain('name="language"\r\n\r\nen\r\n');
    // Rendered by the proxy: the engine (Whisper) is asked for json.
    expect(text).toContain('name="response_format"\r\n\r\njson\r\n');
    expect(text).toContain('filename="a_b_.wav"');
    expect(sent?.headers.cookie).toBeUndefined();
    expect(sent?.headers['x-forwarded-for']).toBeUndefined();
  });

  it('accepts a 24 MiB file sent before model without holding it in memory', async () => {
    const modelPart = Buffer.from(`--B\r\nContent-Disposition: form-data; name="model"\r\n\r\n${whisper.id}\r\n`);
    async function* upload(modelFirst: boolean) {
      if (modelFirst) yield modelPart;
      yield Buffer.from(`--B\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`);
      for (let i = 0; i < 24; i++) {
        // Paced, a MiB every 50 ms: the upload lasts over a second, so the samples below (every
        // 250 ms) fall while the file passes.
        if (!modelFirst) await new Promise((resolve) => setTimeout(resolve, 50));
        yield Buffer.alloc(MiB, 3);
      }
      yield Buffer.from('\r\n');
      if (!modelFirst) yield modelPart;
      yield Buffer.from('--B--\r\n');
    }
    const send = async (modelFirst: boolean) => {
      const response = await streamedTranscription(acmeKey, 'B', upload(modelFirst));
      expect(response.status).toBe(200);
      expect(await jsonOf(response)).toEqual({ text: `Simulated transcription of ${24 * MiB} bytes of audio.` });
    };
    // The streamed-through order first: it also brings the process's buffers to their working size.
    await send(true);
    // What this process (client, proxy and simulated engine) holds live while the file passes, sampled
    // after collections: chunks in flight at each stage, under 1 MiB of growth seen, also beside
    // three busy loops and a disk writer. A proxy that holds the file once holds 24 MiB more (tried:
    // spooling replaced by collecting the file's chunks before writing them, 24,835,113 bytes).
    expect(await peakLiveGrowth(() => send(false))).toBeLessThan(8 * MiB);
    // Each sample collects garbage in the whole process (the app is in it): slow under load.
  }, 120_000);

  it('transcribes with the official openai client, which sends the file before the model', async () => {
    const transcription = await client(acmeKey).audio.transcriptions.create({ file: await toFile(audio, 'a.wav'), model: whisper.id });
    expect(transcription.text).toBe('Simulated transcription of 3000 bytes of audio.');
  });

  it('refuses a form without a file, or without a model, with 400 missing_required_parameter', async () => {
    const noFile = await transcribe(acmeKey, 'B', multipart('B', [{ name: 'model', value: whisper.id }]));
    expect(await jsonOf(noFile)).toMatchObject({ error: { code: 'missing_required_parameter', param: 'file' } });
    const noModel = await transcribe(acmeKey, 'B', multipart('B', [{ name: 'file', filename: 'a.wav', data: audio }]));
    expect(noModel.status).toBe(400);
    expect(await jsonOf(noModel)).toMatchObject({ error: { code: 'missing_required_parameter', param: 'model' } });
  });
});

describe('engine errors never reach clients word for word', () => {
  const uids = "['dep-28debacec0894fdb87505ccb79a1325f', 'dep-bc766eb8bb1a44a9a73995cac9a29cbc']";
  const traceback =
    'Traceback (most recent call last):\n  File "/opt/inference/xinference/api/restful_api.py", line 1412, in create_chat_completion\n' +
    'xoscar.errors.ActorNotExist: worker 10.0.3.7:30001 lost the actor';

  it.each([
    [404, 'application/json', JSON.stringify({ detail: `Model not found in the model list, uid: x. Available model uids: ${uids}` }), 502, 'upstream_error', 'The model failed to answer.'],
    [500, 'text/plain', traceback, 502, 'upstream_error', 'The model failed to answer.'],
    [400, 'application/json', JSON.stringify({ detail: `Model not found in the model list, uid: dep-28debacec0894fdb87505ccb79a1325f` }), 400, 'engine_rejected_request', 'The model refused the request as invalid.'],
    [400, 'application/json', JSON.stringify({ detail: traceback }), 400, 'engine_rejected_request', 'The model refused the request as invalid.'],
    // An engine 401 or 403 also answers 502 with this message, and stops the cluster's traffic:
    // inference-fidelity.test.ts.
  ])('answers an engine %i with a fixed message, without uids, paths or addresses', async (status, contentType, body, expected, code, message) => {
    stub.behave(CHAT, answers(status, contentType, body));
    const { error, response } = await chatAs(chatOnlyKey, { model: chat.id, messages: [hello] });
    stub.behave(CHAT, undefined);
    expect(response.status).toBe(expected);
    expect(error).toEqual({ error: { message, type: expected === 400 ? 'invalid_request_error' : 'server_error', code, param: null } });
    const text = JSON.stringify(error);
    for (const leak of ['dep-', 'Traceback', 'restful_api', '10.0.3', 'Available', 'uid']) expect(text).not.toContain(leak);
  });

  it('passes a short validation message that names nothing of the cluster', async () => {
    const reason = "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (1000 in the messages, 4000 in the completion).";
    stub.behave(CHAT, answers(400, 'application/json', JSON.stringify({ object: 'error', message: reason, type: 'BadRequestError', code: 400 })));
    const context = await chatAs(chatOnlyKey, { model: chat.id, messages: [hello] });
    stub.behave(CHAT, answers(422, 'application/json', JSON.stringify({ detail: [{ type: 'less_than_equal', loc: ['body', 'top_k'], msg: 'Input should be less than or equal to 100', input: 'secret prompt' }] })));
    const pydantic = await chatAs(chatOnlyKey, { model: chat.id, messages: [hello] });
    stub.behave(CHAT, undefined);
    expect(context.error).toMatchObject({ error: { code: 'engine_rejected_request', message: `The model refused the request: ${reason}` } });
    expect(pydantic.error).toMatchObject({ error: { code: 'engine_rejected_request', message: 'The model refused the request: top_k: Input should be less than or equal to 100' } });
  });

  it('keeps the model list from the official openai client too, and Retry-After of an overloaded engine', async () => {
    stub.behave(CHAT, answers(503, 'application/json', JSON.stringify({ detail: `Model is loading: dep-28debacec0894fdb87505ccb79a1325f on worker 10.0.3.7` }), { 'retry-after': '7' }));
    const error = (await client(chatOnlyKey)
      .chat.completions.create({ model: chat.id, messages: [{ role: 'user', content: 'hi' }] })
      .catch((failure: unknown) => failure)) as InstanceType<typeof OpenAI.APIError>;
    stub.behave(CHAT, undefined);
    expect(error.status).toBe(503);
    expect(error.code).toBe('engine_overloaded');
    expect(error.headers?.get('retry-after')).toBe('7');
    expect(error.message).not.toMatch(/dep-|10\.0\.3/);
  });
});

/** Sends headers and the first 64 KiB of a body of `declared` bytes, never the rest; resolves with the answer (node:http: no fetch client sends half a body). */
function partialPost(path: string, headers: Record<string, string>, declared: number) {
  return new Promise<{ status: number; headers: IncomingHttpHeaders; body: string; sent: number }>((resolve, reject) => {
    const req = request(`${app.url}${path}`, { method: 'POST', headers: { ...headers, 'content-length': String(declared) } });
    const first = Buffer.from(`{"model":"${chat.id}","messages":[{"role":"user","content":"${'a'.repeat(64 * 1024)}`);
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString(), sent: first.length });
        req.destroy();
      });
    });
    req.on('error', reject);
    req.write(first);
  });
}

/**
 * Sends a chunked body (no declared length) with no credentials, 64 KiB at a time, on past the
 * answer until the server closes the connection or `most` bytes are sent; resolves with the answer
 * and how the sending ended.
 */
function sendAfterRefusal(path: string, most: number) {
  return new Promise<{ status: number; headers: IncomingHttpHeaders; body: string; sent: number; ended: string }>((resolve) => {
    const req = request(`${app.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' } });
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    let sent = 0;
    let answer: { status: number; headers: IncomingHttpHeaders; body: string } | undefined;
    const finish = (ended: string) => {
      req.destroy();
      resolve({ ...(answer ?? { status: 0, headers: {}, body: '' }), sent, ended });
    };
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (data: Buffer) => chunks.push(data));
      res.on('end', () => (answer = { status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', (error: NodeJS.ErrnoException) => finish(error.code ?? error.message));
    req.on('close', () => finish('closed'));
    const send = () => {
      while (sent < most) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', send);
      }
      finish('sent everything');
    };
    req.write('{"model":"x","messages":[{"role":"user","content":"');
    send();
  });
}

describe('authentication comes before the body', () => {
  it('refuses an unauthenticated 9 MB body with 401 before the body is sent, and closes the connection', async () => {
    const answer = await partialPost('/v1/chat/completions', { 'content-type': 'application/json' }, 9 * 1000 * 1000);
    expect(answer.status).toBe(401);
    expect(JSON.parse(answer.body)).toMatchObject({ error: { code: 'missing_credentials', type: 'authentication_error' } });
    expect(answer.headers.connection).toBe('close');
    expect(answer.sent).toBeLessThan(100 * 1024);
  });

  it('discards at most 1 MiB of an unauthenticated body still being sent after the 401, then closes the connection', async () => {
    const outcome = await sendAfterRefusal('/v1/chat/completions', 64 * MiB);
    expect(outcome.status).toBe(401);
    expect(outcome.headers.connection).not.toBe('close');
    expect(JSON.parse(outcome.body)).toMatchObject({ error: { code: 'missing_credentials' } });
    // Drained past the answer, never to the end: the server cut the connection off.
    expect(outcome.ended).toMatch(/ECONNRESET|EPIPE|closed/);
    expect(outcome.sent).toBeGreaterThan(MiB);
    expect(outcome.sent).toBeLessThan(64 * MiB);
  });

  it('refuses a forged key and a cookie-less session the same way, before the body', async () => {
    const forged = await partialPost('/v1/chat/completions', { 'content-type': 'application/json', authorization: `Bearer ${generateKey()}` }, 9 * 1000 * 1000);
    expect(forged.status).toBe(401);
    expect(JSON.parse(forged.body)).toMatchObject({ error: { code: 'invalid_api_key' } });
    const expired = await partialPost('/v1/chat/completions', { 'content-type': 'application/json', cookie: 'session=not-a-session' }, 9 * 1000 * 1000);
    expect(expired.status).toBe(401);
    expect(JSON.parse(expired.body)).toMatchObject({ error: { code: 'invalid_session' } });
  });

  it('refuses arrays over the documented bounds with 400', async () => {
    const stops = await chatAs(chatOnlyKey, { model: chat.id, messages: [hello], stop: ['a', 'b', 'c', 'd', 'e'] });
    expect(stops.response.status).toBe(400);
    expect(stops.error).toMatchObject({ error: { code: 'invalid_parameter' } });
    const messages = await chatAs(chatOnlyKey, { model: chat.id, messages: Array.from({ length: 2049 }, () => hello) });
    expect(messages.response.status).toBe(400);
    const documents = await keyClient(app.url, acmeKey).POST('/v1/rerank', { body: { model: reranker.id, query: 'q', documents: Array.from({ length: 10_001 }, () => 'd') } });
    expect(documents.response.status).toBe(400);
  });
});

describe('usage is keyed on a server-made id and metered in each route’s unit', () => {
  it('writes five rows for five calls with one client X-Request-Id, and keeps it as a label', async () => {
    for (let i = 0; i < 5; i++) {
      const { response } = await chatAs(chatOnlyKey, { model: chat.id, messages: [hello], max_tokens: 4 }, { 'x-request-id': 'same-id-0001' });
      expect(response.status).toBe(200);
      expect(response.headers.get('x-request-id')).toBe('same-id-0001');
    }
    const rows = await usageRows({ request_id: 'same-id-0001' });
    expect(rows).toHaveLength(5);
    expect(new Set(rows.map((row) => row.usage_id)).size).toBe(5);
    expect(rows.every((row) => row.unit === 'token' && row.outcome === 'completed' && !row.estimated && Number(row.quantity) === row.total_tokens)).toBe(true);
  });

  it('lets no tenant pre-claim another tenant’s request id', async () => {
    const claimed = await chatAs(chatOnlyKey, { model: chat.id, messages: [hello], max_tokens: 2 }, { 'x-request-id': 'shared-id-0042' });
    expect(claimed.response.status).toBe(200);
    const body = multipart('B', [{ name: 'model', value: bravoWhisper.id }, { name: 'file', filename: 'a.wav', data: audio }]);
    expect((await transcribe(bravoKey, 'B', body, { 'x-request-id': 'shared-id-0042' })).status).toBe(200);
    const rows = await usageRows({ request_id: 'shared-id-0042' });
    expect(rows.map((row) => [row.deployment_id, row.unit])).toEqual([
      [chat.id, 'token'],
      [bravoWhisper.id, 'request'],
    ]);
  });

  it('meters a stream the client left by what was delivered', async () => {
    app.simulator?.setTokenLatencyMs(20);
    const key = await apiKey(acme, [chat.id]);
    const stream = await client(key.key).chat.completions.create({ model: chat.id, messages: [{ role: 'user', content: 'tell a long story' }], stream: true, max_tokens: 300 });
    let read = 0;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content) read++;
      if (read === 5) break;
    }
    let rows: Array<Record<string, unknown>> = [];
    await waitUntil(async () => (rows = await usageRows({ api_key_id: key.id })).length === 1, 'the aborted stream to be metered');
    app.simulator?.setTokenLatencyMs(5);
    const row = rows[0] as Record<string, number | string | boolean>;
    expect(row).toMatchObject({ outcome: 'aborted', estimated: true, unit: 'token', deployment_id: chat.id });
    expect(row.completion_tokens).toBeGreaterThanOrEqual(5);
    expect(row.completion_tokens).toBeLessThan(300);
    expect(row.prompt_tokens).toBeGreaterThan(0);
    expect(Number(row.quantity)).toBe(Number(row.prompt_tokens) + Number(row.completion_tokens));
  });

  it('meters a complete stream by the usage the engine reported', async () => {
    const key = await apiKey(acme, [chat.id]);
    const stream = await client(key.key).chat.completions.create({ model: chat.id, messages: [hello], stream: true, max_tokens: 12 });
    for await (const chunk of stream) void chunk;
    const [row] = await usageRows({ api_key_id: key.id });
    expect(row).toMatchObject({ outcome: 'completed', estimated: false, unit: 'token', completion_tokens: 12 });
  });

  it('meters transcriptions per request, images per image and rerank in the tokens the engine counted', async () => {
    const key = await apiKey(acme, [whisper.id, painter.id, reranker.id]);
    await client(key.key).audio.transcriptions.create({ file: await toFile(audio, 'a.wav'), model: whisper.id });
    const images = await client(key.key).images.generate({ model: painter.id, prompt: 'a lighthouse', n: 2, response_format: 'b64_json' });
    expect(images.data).toHaveLength(2);
    const { data: ranked } = await keyClient(app.url, key.key).POST('/v1/rerank', {
      body: { model: reranker.id, query: 'reset my password', documents: ['office hours', 'reset the password in settings'] },
    });
    const inputTokens = ranked?.meta?.tokens?.input_tokens ?? 0;
    expect(inputTokens).toBeGreaterThan(0);
    const rows = await usageRows({ api_key_id: key.id });
    expect(rows.map((row) => [row.route, row.unit, Number(row.quantity)])).toEqual([
      ['/v1/audio/transcriptions', 'request', 1],
      ['/v1/images/generations', 'image', 2],
      ['/v1/rerank', 'token', inputTokens],
    ]);
  });
});

describe('request validation holds whatever the Content-Type', () => {
  it.each(['/v1/user/signin', '/v1/user/register'])('answers a multipart body on %s with 422 in the Problem shape', async (path) => {
    // A content type the operation does not take, which the typed client cannot send.
    const response = await contractFetch(app.url)(`${app.url}${path}`, { method: 'POST', headers: { 'content-type': 'multipart/form-data; boundary=x' }, body: '--x--\r\n' });
    expect(response.status).toBe(422);
    expect(await jsonOf(response)).toMatchObject({ code: 'VALIDATION_FAILED', status: 422, errors: [{ location: 'body' }], request_id: response.headers.get('x-request-id') });
  });

  it('checks the query of a route sent with a multipart Content-Type', async () => {
    const { error, response } = await acme.api.GET('/api/v1/model-deployments', {
      params: { query: { limit: 100000 } },
      headers: { 'content-type': 'multipart/form-data; boundary=x' },
    });
    expect(response.status).toBe(422);
    expect(error).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ location: 'query/limit' }] });
  });
});

describe('deep nesting and NUL characters are refused, not a 500', () => {
  const nested = (levels: number) => `${'['.repeat(levels)}${']'.repeat(levels)}`;

  it('answers 422 on a management route', async () => {
    const nul = await new Browser(app.url).api.POST('/v1/user/register', {
      body: { email: 'nul@example.com', password: 'correct horse battery', organization: 'Nul', first_name: 'a\u0000b' },
    });
    expect(nul.response.status).toBe(422);
    expect(nul.error).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ location: 'body/first_name' }] });
    // Nested deeper than JSON.stringify can write: the body as text, with plain fetch.
    const deep = await contractFetch(app.url)(`${app.url}/v1/user/signin`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: `{"email":"a@example.com","password":"whatever1","extra":${nested(100_000)}}`,
    });
    expect(deep.status).toBe(422);
    expect(await jsonOf(deep)).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ message: 'nests deeper than 64 levels' }] });
  });

  it('answers 400 invalid_parameter on an inference route', async () => {
    // Nested deeper than JSON.stringify can write: the body as text, with plain fetch.
    const deep = await contractFetch(app.url)(`${app.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${chatOnlyKey}`, 'content-type': 'application/json' },
      body: `{"model":"${chat.id}","messages":[{"role":"user","content":"hi"}],"extra":${nested(400_000)}}`,
    });
    expect(deep.status).toBe(400);
    expect(await jsonOf(deep)).toMatchObject({ error: { type: 'invalid_request_error', code: 'invalid_parameter' } });
    const nul = await chatAs(chatOnlyKey, { model: chat.id, messages: [{ role: 'user', content: 'a\u0000b' }] });
    expect(nul.response.status).toBe(400);
    expect(nul.error).toMatchObject({ error: { code: 'invalid_parameter', param: 'messages/0/content' } });
  });
});

describe('a stalled engine is cut off', () => {
  const firstChunk = 'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}\n\n';

  it('ends a stream that stalls after its first event with an error event, and closes the engine’s connection', async () => {
    let engineSide: ServerResponse | undefined;
    stub.behave(CHAT, (req, res) => {
      req.resume();
      engineSide = res;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(firstChunk);
    });
    const { data: text = '', response } = await keyClient(app.url, chatOnlyKey).POST('/v1/chat/completions', {
      body: { model: chat.id, messages: [hello], stream: true },
      parseAs: 'text',
    });
    stub.behave(CHAT, undefined);
    expect(response.status).toBe(200);
    expect(text.startsWith(firstChunk)).toBe(true);
    expect(text.slice(firstChunk.length)).toBe(
      `data: ${JSON.stringify({ error: { message: 'The model did not answer in time.', type: 'server_error', code: 'upstream_timeout', param: null } })}\n\n`,
    );
    await waitUntil(async () => engineSide?.socket === null || engineSide?.closed === true, 'the engine’s connection to close');
  });

  it('answers 504 when a JSON answer never sends its first byte', async () => {
    stub.behave(CHAT, (req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.flushHeaders();
    });
    const { error, response } = await chatAs(chatOnlyKey, { model: chat.id, messages: [hello] });
    stub.behave(CHAT, undefined);
    expect(response.status).toBe(504);
    expect(error).toEqual({ error: { message: 'The model did not answer in time.', type: 'server_error', code: 'upstream_timeout', param: null } });
  });
});

describe('only documented media types are relayed', () => {
  it.each([
    [200, 'text/html; charset=utf-8'],
    [302, 'text/html'],
    [200, 'application/xml'],
  ])('answers an engine %i %s with 502', async (status, contentType) => {
    stub.behave(CHAT, answers(status, contentType, '<script>alert(document.cookie)</script>', { location: 'http://169.254.169.254/' }));
    const { error, response } = await chatAs(chatOnlyKey, { model: chat.id, messages: [hello] });
    stub.behave(CHAT, undefined);
    expect(response.status).toBe(502);
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    expect(response.headers.get('location')).toBeNull();
    expect(JSON.stringify(error)).not.toContain('<script>');
    expect(error).toMatchObject({ error: { code: 'upstream_error', type: 'server_error' } });
  });
});

describe('forged keys', () => {
  it('never caches an unknown key, and answers 429 to an address after 20 of them', async () => {
    const address = '203.0.113.9';
    const models = (key: string, from: string) => keyClient(app.url, key).GET('/v1/models', { headers: { 'x-forwarded-for': from } });
    const cached = app.container.apiKeys.cacheSize;
    for (let i = 0; i < 20; i++) {
      const { error, response } = await models(generateKey(), address);
      expect(response.status).toBe(401);
      expect(error).toMatchObject({ error: { code: 'invalid_api_key' } });
    }
    expect(app.container.apiKeys.cacheSize).toBe(cached);
    const limited = await models(generateKey(), address);
    expect(limited.response.status).toBe(429);
    expect(Number(limited.response.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(limited.error).toMatchObject({ error: { type: 'rate_limit_error', code: 'too_many_invalid_api_keys' } });
    expect((await models(acmeKey, '198.51.100.7')).response.status).toBe(200);
  });

  it('throttles only failing keys: a valid key from an address that sent 25 bad ones still answers 200', async () => {
    const address = '203.0.113.10';
    const models = (key: string) => keyClient(app.url, key).GET('/v1/models', { headers: { 'x-forwarded-for': address } });
    const statuses: number[] = [];
    for (let i = 0; i < 25; i++) statuses.push((await models(i % 2 ? generateKey() : 'svc-sk-forged')).response.status);
    expect(statuses).toEqual([...Array<number>(20).fill(401), ...Array<number>(5).fill(429)]);
    const valid = await models(acmeKey);
    expect(valid.response.status).toBe(200);
    const twentySixth = await models(generateKey());
    expect(twentySixth.response.status).toBe(429);
    expect(twentySixth.error).toMatchObject({ error: { type: 'rate_limit_error', code: 'too_many_invalid_api_keys' } });
  });
});
