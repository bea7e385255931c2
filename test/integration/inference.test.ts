import { request } from 'node:http';
import { Readable } from 'node:stream';
import type OpenAI from 'openai';
import { NotFoundError, toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findKey, updateKey } from '../../src/api-keys/api-keys.repository.ts';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment, type Deployment } from '../factories/deployments.ts';
import { team } from '../factories/organizations.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser, keyClient } from '../helpers/browser.ts';
import { contractFetch } from '../helpers/contract.ts';
import { jsonOf, unchecked } from '../helpers/http.ts';
import { inferenceClient } from '../helpers/inference-client.ts';
import { waitUntil } from '../helpers/net.ts';
import { startServiceProcess, type ServiceProcess } from '../helpers/service-process.ts';

let app: TestApp;
let owner: SignedInUser;
let chat: Deployment;
let embedder: Deployment;
let whisper: Deployment;
let key: string;

const newKey = (deploymentIds: string[], extra: Parameters<typeof apiKey>[2] = {}) => apiKey(owner, deploymentIds, extra);
const client = (key: string) => inferenceClient(app, key);
const hi = [{ role: 'user' as const, content: 'hi' }];

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' }, { workers: true, cluster: { modelLoadMs: 100, tokenLatencyMs: 5 } });
  owner = await registeredUser(app);
  [chat, embedder, whisper] = await Promise.all([
    deployment(app, owner, 'running', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 }),
    deployment(app, owner, 'running', { model_name: 'bge-m3' }),
    deployment(app, owner, 'running', { model_name: 'whisper-large-v3' }),
  ]);
  key = (await newKey([chat.id, embedder.id, whisper.id])).key;
});
afterAll(() => app.close());

describe('the proxy, through the official openai client', () => {
  it('answers a chat completion, with usage, addressed by deployment id or model name', async () => {
    const byId = await client(key).chat.completions.create({ model: chat.id, messages: [{ role: 'user', content: 'Say hello' }] });
    expect(byId.object).toBe('chat.completion');
    expect(byId.choices[0]?.message.content).toEqual(expect.any(String));
    expect(byId.usage?.total_tokens).toBeGreaterThan(0);
    const byName = await client(key).chat.completions.create({ model: 'qwen2.5-instruct', messages: [{ role: 'user', content: 'Say hello' }] });
    expect(byName.choices[0]?.message.content).toBe(byId.choices[0]?.message.content);
  });

  it('streams a chat completion chunk by chunk, ending with usage', async () => {
    const stream = await client(key).chat.completions.create({
      model: chat.id,
      messages: [{ role: 'user', content: 'Tell me a story' }],
      stream: true,
      max_tokens: 12,
    });
    const pieces: string[] = [];
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      pieces.push(chunk.choices[0]?.delta.content ?? '');
      if (chunk.usage) usage = chunk.usage;
    }
    expect(pieces.filter(Boolean).length).toBeGreaterThan(3);
    expect(usage?.completion_tokens).toBe(12);
  });

  it('embeds text and lists only the models the key may call', async () => {
    const embedding = await client(key).embeddings.create({ model: embedder.id, input: ['first', 'second'] });
    expect(embedding.data).toHaveLength(2);
    expect(embedding.data[0]?.embedding.length).toBeGreaterThan(8);
    const scoped = (await newKey([chat.id])).key;
    const models = await client(scoped).models.list();
    expect(models.data.map((m) => m.id)).toEqual([chat.id]);
  });

  it('records usage per request, off the request path, and when each key was last used', async () => {
    const fresh = await newKey([chat.id]);
    await client(fresh.key).chat.completions.create({ model: chat.id, messages: [{ role: 'user', content: 'count me' }] });
    await app.container.usage.flush();
    const rows = await app.db('usage_records').where({ api_key_id: fresh.id });
    expect(rows).toEqual([expect.objectContaining({ deployment_id: chat.id, route: '/v1/chat/completions', model: 'qwen2.5-instruct' })]);
    expect(rows[0].total_tokens).toBe(rows[0].prompt_tokens + rows[0].completion_tokens);
    await waitUntil(async () => (await app.db('api_keys').where({ id: fresh.id }).first()).last_used_at !== null, 'last_used_at');
  });
});

describe('refusals', () => {
  const status = async (apiKey: string, model = chat.id) => {
    try {
      await client(apiKey).chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] });
      return { status: 200, code: undefined };
    } catch (error) {
      const apiError = error as InstanceType<typeof OpenAI.APIError>;
      return { status: apiError.status, code: apiError.code };
    }
  };

  it.each([
    ['a malformed key', 'svc-sk-short', 'invalid_api_key'],
    ['a key with a wrong checksum', `svc-sk-${'a'.repeat(38)}`, 'invalid_api_key'],
  ])('refuses %s with 401', async (_case, badKey, code) => {
    expect(await status(badKey)).toEqual({ status: 401, code });
  });

  it('refuses a disabled, a revoked and an expired key with 401 and a code saying which', async () => {
    const disabled = await newKey([chat.id]);
    await owner.api.PATCH('/v1/organization/api-keys/{api_key_id}', { params: { path: { api_key_id: disabled.id } }, body: { status: 'disabled' } });
    expect(await status(disabled.key)).toEqual({ status: 401, code: 'api_key_disabled' });

    const revoked = await newKey([chat.id]);
    expect((await status(revoked.key)).status).toBe(200);
    await owner.api.DELETE('/v1/organization/api-keys/{api_key_id}', { params: { path: { api_key_id: revoked.id } } });
    expect(await status(revoked.key)).toEqual({ status: 401, code: 'api_key_revoked' });

    const expired = await newKey([chat.id], { expires_at: new Date(Date.now() + 60_000).toISOString() });
    const stored = await findKey(app.db, Number(chat.organization_id), expired.id);
    if (!stored) throw new Error('no such key');
    await updateKey(app.db, stored, { expires_at: new Date(Date.now() - 1000) });
    expect(await status(expired.key)).toEqual({ status: 401, code: 'api_key_expired' });
  });

  it('refuses a deployment outside the key’s scope with 403 and an unknown model with 404', async () => {
    const narrow = (await newKey([embedder.id])).key;
    expect(await status(narrow)).toEqual({ status: 403, code: 'model_not_in_key_scope' });
    expect(await status(key, 'no-such-model')).toEqual({ status: 404, code: 'model_not_found' });
    const stranger = await registeredUser(app);
    const theirs = await deployment(app, stranger, 'running', { model_name: 'phi-3-mini-128k-instruct' });
    expect(await status(key, theirs.id)).toEqual({ status: 404, code: 'model_not_found' });
  });

  it.each([
    [{ input: 'no model' }, 'missing_required_parameter', 'model'],
    [{ model: 'x', messages: [{ role: 'user', content: 'hi' }], temperature: 5 }, 'invalid_parameter', 'temperature'],
  ])('refuses the body %o with 400 %s', async (body, code, param) => {
    const api = keyClient(app.url, key);
    const { error, response } =
      'messages' in body ? await api.POST('/v1/chat/completions', { body: unchecked(body) }) : await api.POST('/v1/embeddings', { body: unchecked(body) });
    expect(response.status).toBe(400);
    expect(error).toMatchObject({ error: { type: 'invalid_request_error', code, param } });
  });

  it('answers 503 with Retry-After while the deployment is not running yet', async () => {
    app.simulator?.setModelLoadMs(60_000);
    const { id } = await deployment(app, owner, 'requested', { model_name: 'gemma-3-it' });
    const loading = (await newKey([id])).key;
    const { error, response } = await keyClient(app.url, loading).POST('/v1/chat/completions', { body: { model: id, messages: hi } });
    app.simulator?.setModelLoadMs(100);
    expect(response.status).toBe(503);
    expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(error).toMatchObject({ error: { code: 'deployment_not_running', type: 'server_error', param: 'model' } });
  });
});

describe('the session as credential', () => {
  it('lets a member call inference with the cookie and the CSRF header, and refuses a viewer', async () => {
    const ask = { body: { model: chat.id, messages: hi } };
    expect((await owner.api.POST('/v1/chat/completions', ask)).response.status).toBe(200);
    owner.browser.sendCsrfHeader = false;
    const noCsrf = await owner.api.POST('/v1/chat/completions', ask);
    owner.browser.sendCsrfHeader = true;
    expect(noCsrf.response.status).toBe(403);
    expect(noCsrf.error).toMatchObject({ error: { code: 'csrf_failed', type: 'permission_error' } });

    const members = await team(app);
    const viewer = await members.viewer.api.POST('/v1/chat/completions', ask);
    expect(viewer.response.status).toBe(403);
    expect(viewer.error).toMatchObject({ error: { code: 'insufficient_role' } });
  });

  it('answers 401 missing_credentials with neither key nor cookie', async () => {
    const { error, response } = await new Browser(app.url).api.GET('/v1/models');
    expect(response.status).toBe(401);
    expect(error).toMatchObject({ error: { code: 'missing_credentials', type: 'authentication_error' } });
  });
});

describe('streaming mechanics', () => {
  it('aborts the upstream generation when the client disconnects', async () => {
    app.simulator?.setTokenLatencyMs(50);
    const before = app.simulator?.abortedRequests ?? 0;
    // A client that leaves mid-stream: node:http, to drop the connection after the first bytes.
    await new Promise<void>((resolve, reject) => {
      const req = request(`${app.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      });
      req.on('response', (res) => {
        res.once('data', () => {
          req.destroy();
          resolve();
        });
      });
      req.on('error', (error) => (req.destroyed ? resolve() : reject(error)));
      req.end(JSON.stringify({ model: chat.id, stream: true, max_tokens: 500, messages: [{ role: 'user', content: 'a long story' }] }));
    });
    await waitUntil(async () => (app.simulator?.abortedRequests ?? 0) > before, 'the engine to see the abort');
    app.simulator?.setTokenLatencyMs(5);
  });

  it('streams a large upload through to the engine without holding it', async () => {
    const boundary = 'test-boundary-7d3a';
    const megabyte = Buffer.alloc(1024 * 1024, 7);
    const seenByEngine = () => app.simulator?.requests['POST /v1/audio/transcriptions'] ?? 0;
    const before = seenByEngine();
    async function* parts() {
      yield Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\n${whisper.id}\r\n`);
      yield Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`);
      yield megabyte;
      // The rest is sent only once the engine has started receiving: a proxy that held the upload
      // until it had all of it would never get there.
      await waitUntil(async () => seenByEngine() > before, 'the engine to receive the upload while it is sent', 20_000);
      for (let i = 0; i < 19; i++) yield megabyte;
      yield Buffer.from(`\r\n--${boundary}--\r\n`);
    }
    // A multipart body streamed as it is made, which the typed client cannot send (the answer is still checked).
    const response = await contractFetch(app.url)(`${app.url}/v1/audio/transcriptions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
      body: Readable.toWeb(Readable.from(parts())) as ReadableStream,
      duplex: 'half',
    } as RequestInit);
    expect(response.status).toBe(200);
    expect(await jsonOf(response)).toEqual({ text: `Simulated transcription of ${20 * 1024 * 1024} bytes of audio.` });
  });

  it('refuses an upload over 25 MiB with 413, an answer the client reads (not a reset)', async () => {
    const boundary = 'b';
    const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\n${whisper.id}\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n`);
    const megabyte = Buffer.alloc(1024 * 1024);
    // Streamed a MiB at a time as the service reads it (chunked, no length to refuse up front), until
    // it answers: a connection reset instead of its answer fails here.
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request(`${app.url}/v1/audio/transcriptions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
      });
      let answered = false;
      req.on('response', (res) => {
        answered = true;
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        res.on('error', reject);
      });
      req.on('error', (error) => (answered ? undefined : reject(error)));
      void (async () => {
        req.write(head);
        for (let sent = 0; sent < 26 && !answered; sent++) {
          if (!req.write(megabyte)) await new Promise((drained) => req.once('drain', drained).once('close', drained));
        }
        if (!answered) req.end();
      })();
    });
    expect(answer.status).toBe(413);
    expect(JSON.parse(answer.body)).toMatchObject({ error: { type: 'invalid_request_error' } });
  });
});

describe('answers given before the body is read', () => {
  // A separate API process, as production runs it: in one process with the client, the event loop
  // reads the answer before it sees the closed connection, and the race never shows.
  let api: ServiceProcess;
  beforeAll(async () => {
    api = await startServiceProcess(app, { ROLE: 'api' });
  });
  afterAll(() => api?.kill());

  it('reach the openai client as the documented error every time, never as a connection error', async () => {
    // The openai client sends `model` before `file`: the proxy refuses the model (nothing named so
    // runs) before it reads the audio, while the client is still sending it.
    const sdk = inferenceClient({ url: api.url as string }, key);
    const audio = Buffer.alloc(3 * 1024 * 1024, 7);
    const outcomes: string[] = [];
    for (let i = 0; i < 30; i++) {
      const failure = await sdk.audio.transcriptions
        .create({ model: 'whisper-large-v3-turbo', file: await toFile(audio, 'speech.wav') })
        .then(() => 'answered 200', (error: unknown) => error);
      outcomes.push(failure instanceof NotFoundError && failure.code === 'model_not_found' ? 'model_not_found' : describeFailure(failure));
    }
    expect(outcomes).toEqual(Array.from({ length: 30 }, () => 'model_not_found'));
  });
});

/** A failure with the chain of its causes (`Connection error. < fetch failed < EPIPE`). */
function describeFailure(failure: unknown): string {
  const chain: string[] = [];
  for (let at = failure as { message?: string; code?: string; cause?: unknown } | undefined; at && chain.length < 5; at = at.cause as typeof at) {
    chain.push(at.code ?? at.message ?? String(at));
  }
  return chain.join(' < ');
}
