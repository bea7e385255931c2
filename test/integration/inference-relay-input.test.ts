import { readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser } from '../factories/accounts.ts';
import { deployment, type Deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { contractFetch } from '../helpers/contract.ts';
import { EngineStub } from '../helpers/engine-stub.ts';
import { waitUntil } from '../helpers/net.ts';

/**
 * What the relay accepts and forwards, each attack reproduced over HTTP with an engine stub in front of
 * the cluster simulator that records what reached the engine.
 */

let app: TestApp;
let stub: EngineStub;
let whisper: Deployment;
let chat: Deployment;
let embedder: Deployment;
let reranker: Deployment;
let painter: Deployment;
let key: string;
/** Every line the service logs, at debug. */
const logLines: string[] = [];

const TRANSCRIPTIONS = 'POST /v1/audio/transcriptions';
const MB = 1_000_000;

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING }, { workers: true, cluster: { modelLoadMs: 100, tokenLatencyMs: 1 }, logLines });
  stub = await EngineStub.inFrontOf(app);
  const acme = await registeredUser(app);
  [whisper, chat, embedder, reranker, painter] = await Promise.all([
    deployment(app, acme, 'running', { model_name: 'whisper-large-v3' }),
    deployment(app, acme, 'running', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 }),
    deployment(app, acme, 'running', { model_name: 'bge-m3' }),
    deployment(app, acme, 'running', { model_name: 'bge-reranker-v2-m3' }),
    deployment(app, acme, 'running', { model_name: 'FLUX.1-schnell' }),
  ]);
  key = (await apiKey(acme, [whisper.id, chat.id, embedder.id, reranker.id, painter.id])).key;
}, 120_000);

afterAll(async () => {
  await app?.close();
  await stub?.stop();
});

describe('the transcription limit counts the whole body', () => {
  const form = (preamble: string, epilogue: string) =>
    Buffer.concat([
      Buffer.from(preamble),
      Buffer.from(`--B\r\nContent-Disposition: form-data; name="model"\r\n\r\n${whisper.id}\r\n`),
      Buffer.from('--B\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n'),
      Buffer.alloc(3000, 1),
      Buffer.from('\r\n--B--\r\n'),
      Buffer.from(epilogue),
    ]);
  const upload = (body: Buffer) =>
    contractFetch(app.url)(`${app.url}/v1/audio/transcriptions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'multipart/form-data; boundary=B' },
      body,
    }).catch((error: unknown) => error as Error);

  it('refuses a 28 MB preamble around a 3 KB file with 413 and never sends the engine a complete form', async () => {
    const before = stub.requestsTo(TRANSCRIPTIONS).length;
    const response = await upload(form('x'.repeat(28 * MB), ''));
    if (response instanceof Response) expect(response.status).toBe(413);
    else expect(String(response)).toMatch(/fetch failed|socket|reset/i);
    expect(stub.requestsTo(TRANSCRIPTIONS)).toHaveLength(before);
  });

  it('refuses a 28 MB epilogue after the closing boundary with 413', async () => {
    const response = await upload(form('', 'x'.repeat(28 * MB)));
    if (response instanceof Response) expect(response.status).toBe(413);
    else expect(String(response)).toMatch(/fetch failed|socket|reset/i);
    const sent = stub.requestsTo(TRANSCRIPTIONS).at(-1);
    // The engine may have had the file streamed to it, never the form's closing boundary.
    expect(sent?.body.toString('latin1') ?? '').not.toMatch(/--\r\n$/);
  });

  it('still transcribes a small form with a short preamble', async () => {
    const response = await upload(form('a preamble\r\n', ''));
    expect(response).toBeInstanceOf(Response);
    expect((response as Response).status).toBe(200);
  });
});

/** A JSON body as bytes through node:http (no copy by a client library), its answer parsed. */
function postJson(path: string, body: Buffer, headers: Record<string, string> = {}): Promise<{ status: number; body: { error?: { message: string; type: string; code: string | null; param: string | null } } }> {
  return new Promise((resolve, reject) => {
    const req = request(`${app.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': body.length, ...headers },
    });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** The process's peak resident set since `resetPeakRss` (Linux: VmHWM, reset through clear_refs), in bytes. */
function peakRss(): number {
  return Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1]) * 1024;
}

function resetPeakRss(): void {
  writeFileSync('/proc/self/clear_refs', '5');
}

describe('inference bodies hold only what the contract names, at a bounded parsing cost', () => {
  const hello = [{ role: 'user', content: 'hello' }];
  const engineCalls = () => stub.recorded.length;

  it.each([
    ['/v1/chat/completions', () => ({ model: chat.id, messages: hello, guided_json: { a: 1 } }), 'guided_json'],
    ['/v1/chat/completions', () => ({ model: chat.id, messages: hello, request_id: 'victim' }), 'request_id'],
    ['/v1/embeddings', () => ({ model: embedder.id, input: 'hello', lora_name: 'x' }), 'lora_name'],
    ['/v1/rerank', () => ({ model: reranker.id, query: 'q', documents: ['a'], extra: [] }), 'extra'],
    ['/v1/images/generations', () => ({ model: painter.id, prompt: 'a cat', kwargs: '{}' }), 'kwargs'],
  ])('refuses an unknown top-level field on %s with 400 unsupported_parameter, as OpenAI does, before the engine', async (path, body, field) => {
    const before = engineCalls();
    const response = await contractFetch(app.url)(`${app.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body()),
    });
    expect(response.status).toBe(400);
    expect(await response.json()).toEqual({
      error: { message: `Unrecognized request argument supplied: ${field}`, type: 'invalid_request_error', code: 'unsupported_parameter', param: field },
    });
    expect(engineCalls()).toBe(before);
  });

  it('accepts the engine extensions the contract names, top_k and repetition_penalty, and forwards them', async () => {
    const response = await postJson('/v1/chat/completions', Buffer.from(JSON.stringify({ model: chat.id, messages: hello, top_k: 40, repetition_penalty: 1.1 })));
    expect(response.status).toBe(200);
    const sent = JSON.parse(stub.requestsTo('POST /v1/chat/completions').at(-1)?.body.toString('utf8') ?? '{}') as Record<string, unknown>;
    expect(sent).toMatchObject({ top_k: 40, repetition_penalty: 1.1, model: chat.engine_model_uid });
  });

  const emptyObjects = (count: number) => Buffer.from(`{"model":"${chat.id}","messages":[{"role":"user","content":"hi"}],"extra":[${'{},'.repeat(count - 1)}{}]}`);
  const manyKeys = (count: number) =>
    Buffer.from(
      `{"model":"${chat.id}","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{${Array.from({ length: count }, (_, i) => `"k${i}":0`).join(',')}}}}]}`,
    );
  const nested = (levels: number) => Buffer.from(`{"model":"${chat.id}","messages":[{"role":"user","content":${'['.repeat(levels)}${']'.repeat(levels)}}]}`);
  const shortStrings = (arrays: number) =>
    Buffer.from(`{"model":"${reranker.id}","query":"q","documents":["a"],"extra":[${Array(arrays).fill(`[${'"ab",'.repeat(64_999)}"ab"]`).join(',')}]}`);
  const tokenIds = (count: number) => Buffer.from(`{"model":"${embedder.id}","input":[${'7,'.repeat(count - 1)}7]}`);
  const numberArrays = (arrays: number) =>
    Buffer.from(`{"model":"${chat.id}","messages":[{"role":"user","content":"hi"}],"extra":[${Array(arrays).fill(`[${'7,'.repeat(64_999)}7]`).join(',')}]}`);
  const longString = (bytes: number) => Buffer.from(`{"model":"${chat.id}","messages":[{"role":"user","content":"hi"}],"extra":"${'a'.repeat(bytes)}"}`);

  // The review's body: 3.25 million empty objects in an unknown field, 9.75 MB (670 MiB of heap before).
  it.each([
    ['3.25 M empty objects in an unknown field', '/v1/chat/completions', () => emptyObjects(3_250_000), 'invalid_parameter', 'The JSON body holds more than 20000 objects and arrays.'],
    ['700,000 keys in a tool schema', '/v1/chat/completions', () => manyKeys(700_000), 'invalid_parameter', 'The JSON body holds more than 100000 object members.'],
    ['4.5 M nested arrays', '/v1/chat/completions', () => nested(4_500_000), 'invalid_parameter', 'The JSON body nests deeper than 64 levels.'],
    ['1.8 M short strings', '/v1/rerank', () => shortStrings(28), 'invalid_parameter', 'The JSON body holds more than 200000 strings.'],
    ['4.5 M token ids', '/v1/embeddings', () => tokenIds(4_500_000), 'invalid_parameter', 'The JSON body holds an array of more than 65536 items.'],
    // Within every bound: parsed, then refused for its unknown field.
    ['70 arrays of 65,000 numbers', '/v1/chat/completions', () => numberArrays(70), 'unsupported_parameter', 'Unrecognized request argument supplied: extra'],
    ['one 9 MB string', '/v1/chat/completions', () => longString(9 * MB), 'unsupported_parameter', 'Unrecognized request argument supplied: extra'],
  ])('parses a hostile 9 MB body (%s) within 10 times its size, and refuses it with 400', async (_name, path, build, code, message) => {
    const body = build();
    expect(body.length).toBeGreaterThan(8 * MB);
    const before = engineCalls();
    resetPeakRss();
    const floor = peakRss();
    const response = await postJson(path, body);
    const growth = peakRss() - floor;
    expect(response.status).toBe(400);
    expect(response.body.error?.code).toBe(code);
    if (message) expect(response.body.error?.message).toBe(message);
    // Measured 2 to 3.3 times on an idle machine, up to 6.1 under a loaded CI (the review's body took 70 times before).
    expect(growth).toBeLessThan(10 * body.length);
    expect(engineCalls()).toBe(before);
  });
});

describe('engine internals stay out of answers, client headers out of engine requests', () => {
  const CHAT = 'POST /v1/chat/completions';
  const hello = [{ role: 'user', content: 'hello' }];

  it('drops the engine’s model_replica from embeddings answers, as floats and as base64', async () => {
    for (const encoding_format of ['float', 'base64']) {
      const response = await postJson('/v1/embeddings', Buffer.from(JSON.stringify({ model: embedder.id, input: 'hello', encoding_format })));
      expect(response.status).toBe(200);
      expect(response.body).toHaveProperty('data');
      expect(response.body).not.toHaveProperty('model_replica');
    }
  });

  it('sends the engine the route’s Accept, never the client’s', async () => {
    const response = await postJson('/v1/chat/completions', Buffer.from(JSON.stringify({ model: chat.id, messages: hello })), {
      accept: 'text/html, application/json;q=0.9, x/\u00ff',
    });
    expect(response.status).toBe(200);
    expect(stub.requestsTo(CHAT).at(-1)?.headers.accept).toBe('application/json, text/event-stream');
  });

  it('logs a client that left before the answer quietly, not as a contract mismatch at error level', async () => {
    const before = stub.requestsTo(CHAT).length;
    // The engine never answers: the client gives up first.
    stub.behave(CHAT, (req) => void req.resume());
    try {
      const controller = new AbortController();
      const sent = fetch(`${app.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: chat.id, messages: hello }),
        signal: controller.signal,
      }).catch(() => undefined);
      await waitUntil(async () => stub.requestsTo(CHAT).length > before, 'the engine to get the request');
      controller.abort();
      await sent;
      const settled = () => logLines.some((line) => line.includes('the client left before the answer') || line.includes('response does not match'));
      await waitUntil(async () => settled(), 'the proxy to finish the request');
    } finally {
      stub.behave(CHAT, undefined);
    }
    expect(logLines.filter((line) => line.includes('response does not match'))).toEqual([]);
    expect(logLines.filter((line) => JSON.parse(line).level >= 50)).toEqual([]);
  });
});
