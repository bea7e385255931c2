import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startClusterSimulator, type ClusterSimulator } from '../../dev/cluster-simulator.ts';
import { waitUntil } from '../helpers/net.ts';

type Json = Record<string, unknown>;
type Instance = { status: string; model_ability: string[]; replica_statuses: { status: string; error_message: string | null; worker_address: string }[] };

/** An admin access token from the simulator's `/token`, for every route. */
async function signIn(sim: ClusterSimulator): Promise<string> {
  const response = await fetch(`${sim.url}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: sim.credentials?.adminUser, password: sim.credentials?.adminPassword }),
  });
  return ((await response.json()) as { access_token: string }).access_token;
}

const LLM = { model_name: 'qwen2.5-instruct', model_type: 'LLM', model_engine: 'vllm', model_format: 'pytorch', model_size_in_billions: 7, quantization: 'none', replica: 1 };

describe('local GPU cluster simulator (Xinference REST subset)', () => {
  let sim: ClusterSimulator;
  let token: string;

  const call = (path: string, init: RequestInit = {}) => fetch(`${sim.url}${path}`, { ...init, headers: { authorization: `Bearer ${token}`, ...(init.headers as Record<string, string>) } });
  const post = (path: string, body: unknown) => call(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const launch = (body: Json, waitReady = false) => post(`/v1/models${waitReady ? '' : '?wait_ready=false'}`, { ...LLM, ...body });
  const instance = async (uid: string) => ((await (await call(`/v1/models/instances?model_uid=${uid}`)).json()) as Instance[])[0];
  const untilStatus = (uid: string, status: string) => waitUntil(async () => (await instance(uid))?.status === status, `${uid} to be ${status}`, 10_000);
  const untilServing = (uid: string) => waitUntil(async () => sim.running().includes(uid), `${uid} to serve`, 10_000);
  const held = (uid: string) => sim.gpus().filter((gpu) => gpu.holders.includes(`${uid}-rep0`));
  const chat = (body: Json) => post('/v1/chat/completions', { messages: [{ role: 'user', content: 'Tell me about the sea' }], ...body });

  async function readSse(response: Response): Promise<string[]> {
    const text = await response.text();
    return text.split('\r\n\r\n').filter(Boolean);
  }

  async function launchReady(uid: string, body: Json = {}): Promise<void> {
    const response = await launch({ model_uid: uid, ...body });
    expect(response.status).toBe(200);
    await untilServing(uid);
  }

  beforeAll(async () => {
    sim = await startClusterSimulator({
      workers: [
        { name: 'sim-a10g', gpuName: 'NVIDIA A10G', gpuCount: 2, gpuMemoryGb: 24 },
        { name: 'sim-a100', gpuName: 'NVIDIA A100-SXM4-80GB', gpuCount: 1, gpuMemoryGb: 80 },
      ],
      modelLoadMs: 200,
      tokenLatencyMs: 2,
      completionTokens: 8,
    });
    token = await signIn(sim);
  });
  afterAll(() => sim.stop());
  afterEach(async () => {
    for (const uid of sim.running()) await call(`/v1/models/${uid}`, { method: 'DELETE' });
  });

  it('launches in the background, reports progress, is READY before it serves, then serves and lists the model, and frees its GPUs on termination', async () => {
    sim.setModelLoadMs(4000); // long enough to observe the launching states on a busy machine
    const launched = await launch({ model_uid: 'chat-1', n_gpu: 2 });
    sim.setModelLoadMs(200);
    expect(launched.status).toBe(200);
    expect(await launched.json()).toEqual({ model_uid: 'chat-1' });

    const creating = await instance('chat-1');
    expect(creating).toMatchObject({ status: 'CREATING', model_uid: 'chat-1', model_name: 'qwen2.5-instruct', replica: 1 });
    const progress = (await (await call('/v1/models/chat-1/progress')).json()) as { progress: number };
    expect(progress.progress).toBeGreaterThanOrEqual(0);
    expect(progress.progress).toBeLessThan(1);
    const loading = await call('/v1/models/chat-1');
    expect(loading.status).toBe(503);
    expect(loading.headers.get('retry-after')).toBe('30');
    expect(((await loading.json()) as Json).detail).toMatch(/^Model is loading, please retry later/);
    const early = await chat({ model: 'chat-1' });
    expect(early.status).toBe(503);
    expect(held('chat-1')).toHaveLength(2);

    // The worker reports the instance READY once the engine's load() returned, before it serves.
    await untilStatus('chat-1', 'READY');
    const loaded = await instance('chat-1');
    expect(loaded?.replica_statuses[0]?.status).toBe('CREATING');
    expect((await call('/v1/models/chat-1')).status).toBe(503);
    expect((await chat({ model: 'chat-1' })).status).toBe(503);
    await untilServing('chat-1');
    expect((await instance('chat-1'))?.replica_statuses[0]?.status).toBe('READY');
    expect((await instance('chat-1'))?.model_ability).toEqual(['chat', 'tools']);
    expect(((await (await call('/v1/models/chat-1/progress')).json()) as Json).progress).toBe(1);
    expect(sim.running()).toEqual(['chat-1']);
    const described = (await (await call('/v1/models/chat-1')).json()) as Json;
    expect(described).toMatchObject({ model_type: 'LLM', model_name: 'qwen2.5-instruct', model_engine: 'vllm', accelerators: ['0', '1'], replica: 1 });
    const list = (await (await call('/v1/models')).json()) as { object: string; data: Json[] };
    expect(list.object).toBe('list');
    expect(list.data).toEqual([expect.objectContaining({ id: 'chat-1', object: 'model', owned_by: 'xinference', model_type: 'LLM' })]);

    const info = (await (await call('/v1/cluster/info?detailed=true')).json()) as Json[];
    expect(info[0]).toMatchObject({ node_type: 'Supervisor' });
    expect(info.slice(1)).toEqual([
      expect.objectContaining({ node_type: 'Worker', ip_address: 'sim-a10g:30001', gpu_count: 2, gpu_vram_total: 2 * 24 * 1024 ** 3 }),
      expect.objectContaining({ node_type: 'Worker', ip_address: 'sim-a100:30001', gpu_count: 1, gpu_vram_total: 80 * 1024 ** 3 }),
    ]);
    expect(info[1]?.gpu_vram_available).toBeLessThan(2 * 24 * 1024 ** 3);
    const status = (await (await fetch(`${sim.url}/status`)).json()) as { workers: Record<string, { status: Record<string, { name?: string }> }> };
    expect(status.workers['sim-a100:30001']?.status['gpu-0']?.name).toBe('NVIDIA A100-SXM4-80GB');

    const terminated = await call('/v1/models/chat-1', { method: 'DELETE' });
    expect(terminated.status).toBe(200);
    expect(await terminated.json()).toBeNull();
    expect(await instance('chat-1')).toBeUndefined();
    expect(held('chat-1')).toHaveLength(0);
    expect(sim.gpus().every((gpu) => gpu.heldBy === null)).toBe(true);
    expect(sim.terminations.map((t) => t.modelUid)).toEqual(['chat-1']);
    const gone = await call('/v1/models/chat-1', { method: 'DELETE' });
    expect(gone.status).toBe(400);
    expect(await gone.json()).toEqual({ detail: 'Model not found in the model list, uid: chat-1' });
  });

  it('answers chat completions as JSON with usage, and as SSE with a usage chunk and [DONE]', async () => {
    await launchReady('chat-2');
    const plain = await chat({ model: 'chat-2', max_tokens: 5 });
    expect(plain.status).toBe(200);
    const completion = (await plain.json()) as { object: string; model: string; choices: { message: { role: string; content: string }; finish_reason: string }[]; usage: Json };
    expect(completion.object).toBe('chat.completion');
    expect(completion.model).toBe('chat-2');
    expect(completion.choices[0]?.message.role).toBe('assistant');
    expect(completion.choices[0]?.message.content.split(' ')).toHaveLength(5);
    expect(completion.choices[0]?.finish_reason).toBe('length');
    expect(completion.usage).toEqual({ prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 });

    const streamed = await chat({ model: 'chat-2', stream: true, stream_options: { include_usage: true } });
    expect(streamed.status).toBe(200);
    expect(streamed.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = await readSse(streamed);
    expect(events.at(-1)).toBe('data: [DONE]');
    const chunks = events.slice(0, -1).map((event) => JSON.parse(event.slice('data: '.length)) as { object: string; choices: { delta: { content?: string; role?: string }; finish_reason: string | null }[]; usage?: Json });
    expect(chunks.every((chunk) => chunk.object === 'chat.completion.chunk')).toBe(true);
    expect(chunks[0]?.choices[0]?.delta.role).toBe('assistant');
    const text = chunks.map((chunk) => chunk.choices[0]?.delta.content ?? '').join('');
    expect(text.split(' ')).toHaveLength(8);
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe('stop');
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 8, total_tokens: 13 } });

    const withoutUsage = await readSse(await chat({ model: 'chat-2', stream: true }));
    expect(withoutUsage.some((event) => event.includes('"usage"'))).toBe(false);
  });

  it('serves embeddings, rerank, transcriptions and images for models of those types', async () => {
    await launchReady('embed-1', { model_name: 'bge-small-en-v1.5', model_type: 'embedding', model_engine: null });
    await launchReady('rerank-1', { model_name: 'bge-reranker-base', model_type: 'rerank', model_engine: null, n_gpu: null });
    await launchReady('audio-1', { model_name: 'whisper-small', model_type: 'audio', model_engine: null, n_gpu: null });
    await launchReady('image-1', { model_name: 'sd-turbo', model_type: 'image', model_engine: null, n_gpu: null });

    const embedded = (await (await post('/v1/embeddings', { model: 'embed-1', input: ['first text', 'second text here'] })).json()) as { object: string; data: { index: number; embedding: number[] }[]; usage: Json };
    expect(embedded.object).toBe('list');
    expect(embedded.data.map((d) => d.index)).toEqual([0, 1]);
    for (const { embedding } of embedded.data) {
      expect(embedding).toHaveLength(384);
      expect(Math.hypot(...embedding)).toBeCloseTo(1, 6);
    }
    expect(embedded.usage).toEqual({ prompt_tokens: 5, total_tokens: 5 });
    const single = (await (await post('/v1/embeddings', { model: 'embed-1', input: 'first text' })).json()) as typeof embedded;
    expect(single.data[0]?.embedding).toEqual(embedded.data[0]?.embedding);

    const documents = ['the weather is sunny', 'a guide to the sea and tides', 'tax forms'];
    const reranked = (await (await post('/v1/rerank', { model: 'rerank-1', query: 'sea tides', documents, top_n: 2, return_documents: true })).json()) as {
      id: string;
      results: { index: number; relevance_score: number; document: { text: string } | null }[];
      meta: Json;
    };
    expect(reranked.results).toHaveLength(2);
    expect(reranked.results[0]).toMatchObject({ index: 1, document: { text: documents[1] } });
    expect(reranked.results[0]?.relevance_score).toBeGreaterThanOrEqual(reranked.results[1]?.relevance_score ?? Infinity);
    expect(reranked.meta).toEqual({ api_version: null, billed_units: null, tokens: null, warnings: null });
    const bare = (await (await post('/v1/rerank', { model: 'rerank-1', query: 'sea tides', documents })).json()) as typeof reranked;
    expect(bare.results).toHaveLength(3);
    expect(bare.results.every((r) => r.document === null)).toBe(true);

    const audio = new Uint8Array(300_000).fill(7);
    const form = new FormData();
    form.append('model', 'audio-1');
    form.append('file', new Blob([audio], { type: 'audio/wav' }), 'clip.wav');
    const transcribed = await call('/v1/audio/transcriptions', { method: 'POST', body: form });
    expect(transcribed.status).toBe(200);
    expect(await transcribed.json()).toEqual({ text: 'Simulated transcription of 300000 bytes of audio.' });

    const image = (await (await post('/v1/images/generations', { model: 'image-1', prompt: 'a lighthouse', response_format: 'b64_json' })).json()) as { data: { b64_json: string }[] };
    // Xinference writes JPEG unless the image has transparency (model/image/utils.py).
    const jpeg = Buffer.from(image.data[0]?.b64_json ?? '', 'base64');
    expect([...jpeg.subarray(0, 3)]).toEqual([0xff, 0xd8, 0xff]);
    expect([...jpeg.subarray(-2)]).toEqual([0xff, 0xd9]);

    const wrongType = await post('/v1/embeddings', { model: 'rerank-1', input: 'x' });
    expect(wrongType.status).toBe(500);
    for (const uid of ['embed-1', 'rerank-1', 'audio-1', 'image-1']) expect((await call(`/v1/models/${uid}`, { method: 'DELETE' })).status).toBe(200);
  });

  it('answers an unknown model as Xinference does', async () => {
    const response = await chat({ model: 'nope' });
    expect(response.status).toBe(404);
    expect(((await response.json()) as Json).detail).toMatch(/^Model not found in the model list, uid: nope\. Available model uids: \[/);
    const describeUnknown = await call('/v1/models/nope');
    expect(describeUnknown.status).toBe(400);
    expect(await (await call('/v1/models/nope/progress')).json()).toMatchObject({ progress: 0, stage: 'pending' });
  });

  it('refuses a relaunch of an existing uid with the "already in the model list" error and keeps one model', async () => {
    await launchReady('dup-1');
    const again = await launch({ model_uid: 'dup-1' });
    expect(again.status).toBe(400);
    expect(await again.json()).toEqual({ detail: 'Model is already in the model list, uid: dup-1' });
    expect(sim.launches.filter((l) => l.modelUid === 'dup-1')).toHaveLength(2);
    expect(sim.running()).toContain('dup-1');
    expect((await call('/v1/models/dup-1', { method: 'DELETE' })).status).toBe(200);
  });

  it('shares GPUs by default: a second vLLM model on a full GPU fails to load for lack of memory', async () => {
    await launchReady('share-1', { worker_ip: 'sim-a100:30001' });
    expect((await launch({ model_uid: 'share-2', worker_ip: 'sim-a100:30001' })).status).toBe(200);
    await untilStatus('share-2', 'ERROR');
    expect((await instance('share-2'))?.replica_statuses[0]?.error_message).toMatch(/less than desired GPU memory utilization/);
    expect(sim.gpus().find((gpu) => gpu.worker === 'sim-a100')?.holders).toEqual(['share-1-rep0']);
    expect((await call('/v1/models/share-1', { method: 'DELETE' })).status).toBe(200);
  });

  it('rejects wait_ready in the body as Xinference does (it is a query parameter)', async () => {
    const response = await post('/v1/models', { ...LLM, model_uid: 'body-wait', wait_ready: false });
    expect(response.status).toBe(500);
    expect(((await response.json()) as Json).detail).toMatch(/multiple values for keyword argument 'wait_ready'/);
    expect(await instance('body-wait')).toBeUndefined();
  });

  it('makes an injected launch error and an injected OOM fail the load after it started (after the instance was READY), visible in the instance status', async () => {
    sim.failNextLaunch('error');
    sim.setModelLoadMs(1500);
    expect((await launch({ model_uid: 'fail-1' })).status).toBe(200);
    sim.setModelLoadMs(200);
    expect((await instance('fail-1'))?.status).toBe('CREATING');
    expect(held('fail-1')).toHaveLength(1);
    await untilStatus('fail-1', 'READY');
    await untilStatus('fail-1', 'ERROR');
    const failed = await instance('fail-1');
    expect(failed?.replica_statuses[0]).toMatchObject({ status: 'ERROR', error_message: expect.stringMatching(/Engine core initialization failed/) });
    expect(held('fail-1')).toHaveLength(0);
    expect((await call('/v1/models/fail-1')).status).toBe(400);
    await launchReady('fail-1');
    expect((await call('/v1/models/fail-1', { method: 'DELETE' })).status).toBe(200);

    const control = await post('/_simulator/fail-next-launch', { kind: 'oom', model_uid: 'oom-1' });
    expect(control.status).toBe(200);
    const unaffected = await launch({ model_uid: 'other-1' }, true);
    expect(unaffected.status).toBe(200);
    const oom = await launch({ model_uid: 'oom-1' }, true);
    expect(oom.status).toBe(503);
    expect(((await oom.json()) as Json).detail).toMatch(/^CUDA out of memory\./);
    expect((await instance('oom-1'))?.replica_statuses[0]?.error_message).toMatch(/CUDA out of memory/);
    expect(held('oom-1')).toHaveLength(0);
    expect((await call('/v1/models/other-1', { method: 'DELETE' })).status).toBe(200);
  });

  it('crashes a running model: its stream ends with an error event, then the worker recovers it through ERROR back to READY', async () => {
    await launchReady('crash-1');
    const response = await chat({ model: 'crash-1', stream: true, max_tokens: 5000, ignore_eos: true });
    if (!response.body) throw new Error('no body');
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let text = decoder.decode((await reader.read()).value);
    const crashed = await post('/_simulator/crash/crash-1', {});
    expect(await crashed.json()).toEqual({ crashed: 'crash-1' });
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) text += decoder.decode(chunk.value);
    const events = text.split('\r\n\r\n').filter(Boolean);
    expect(JSON.parse((events.at(-1) ?? '').slice('data: '.length))).toEqual({ error: expect.stringMatching(/^Remote server .* closed$/) });
    expect(text).not.toContain('[DONE]');

    expect(sim.running()).not.toContain('crash-1');
    await untilStatus('crash-1', 'ERROR');
    expect((await chat({ model: 'crash-1' })).status).toBe(503);
    expect(held('crash-1')).toHaveLength(1);
    await untilServing('crash-1');
    expect((await chat({ model: 'crash-1' })).status).toBe(200);

    // Past the recover budget (core/supervisor.py, mark_replica_dead): TERMINATED, dropped from the list, forgotten.
    expect(sim.crash('crash-1', { recover: false })).toBe(true);
    await waitUntil(async () => held('crash-1').length === 0, 'the evicted model to free its GPU');
    expect(await instance('crash-1')).toBeUndefined();
    expect((await chat({ model: 'crash-1' })).status).toBe(404);
    expect((await call('/v1/models/crash-1', { method: 'DELETE' })).status).toBe(400);
    expect(sim.crash('crash-1')).toBe(false);
  });

  it('refuses launches of what Xinference does not have, and chat on a generate-only family', async () => {
    expect((await launch({ model_uid: 'gone-1', model_name: 'gemma-2-it', model_size_in_billions: 9 })).status).toBe(200);
    await untilStatus('gone-1', 'ERROR');
    expect((await instance('gone-1'))?.replica_statuses[0]?.error_message).toBe('Model not found, name: gemma-2-it, format: pytorch, size: 9, quantization: none');
    expect((await launch({ model_uid: 'gone-2', model_size_in_billions: 8 })).status).toBe(200);
    await untilStatus('gone-2', 'ERROR');

    await launchReady('code-1', { model_name: 'codestral-v0.1', model_size_in_billions: 22 });
    expect((await instance('code-1'))?.model_ability).toEqual(['generate']);
    const refused = await chat({ model: 'code-1' });
    expect(refused.status).toBe(500);
    expect(await refused.json()).toEqual({ detail: 'Model codestral-v0.1 is not for chat.' });
    expect((await call('/v1/models/code-1', { method: 'DELETE' })).status).toBe(200);
  });

  it('counts a client that leaves mid-stream and stops generating for it', async () => {
    await launchReady('leave-1');
    const before = sim.generatedTokens;
    const aborted = sim.abortedRequests;
    const controller = new AbortController();
    const streaming = await fetch(`${sim.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${sim.credentials?.apiKey}` },
      body: JSON.stringify({ model: 'leave-1', messages: [{ role: 'user', content: 'long story' }], stream: true, max_tokens: 5000, ignore_eos: true }),
      signal: controller.signal,
    });
    if (!streaming.body) throw new Error('no body');
    const reader = streaming.body.getReader();
    await reader.read();
    await reader.read();
    controller.abort();
    await waitUntil(async () => sim.abortedRequests === aborted + 1 && sim.active() === 0, 'the aborted stream to be noticed', 5_000);
    expect(sim.generatedTokens - before).toBeLessThan(5000);
    expect((await call('/v1/models/leave-1', { method: 'DELETE' })).status).toBe(200);
  });

  it('is deterministic: the same request gives the same text, a different one a different text', async () => {
    await launchReady('det-1');
    const answer = async (content: string) =>
      ((await (await post('/v1/chat/completions', { model: 'det-1', messages: [{ role: 'user', content }] })).json()) as { choices: { message: { content: string } }[] }).choices[0]?.message.content;
    const first = await answer('What is the capital of France?');
    expect(await answer('What is the capital of France?')).toBe(first);
    expect(await answer('Something else entirely')).not.toBe(first);
    const streamed = await readSse(await post('/v1/chat/completions', { model: 'det-1', stream: true, messages: [{ role: 'user', content: 'What is the capital of France?' }] }));
    const text = streamed
      .slice(0, -1)
      .map((event) => (JSON.parse(event.slice(6)) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? '')
      .join('');
    expect(text).toBe(first);
    expect((await call('/v1/models/det-1', { method: 'DELETE' })).status).toBe(200);
  });

  it('counts requests per route and reports its state over HTTP', async () => {
    const state = (await (await call('/_simulator/state')).json()) as Json;
    expect(state).toMatchObject({ running: [], aborted_requests: sim.abortedRequests });
    expect(sim.requests['POST /v1/models']).toBeGreaterThan(5);
    expect(sim.requests['GET /v1/models/{model_uid}/progress']).toBeGreaterThan(0);
    expect((await post('/_simulator/model-load-ms', { ms: 50 })).status).toBe(200);
    expect((state.workers as Json[]).map((w) => w.name)).toEqual(['sim-a10g', 'sim-a100']);
  });
});

describe('cluster simulator with exclusive GPUs (XINFERENCE_ALLOW_MULTI_REPLICA_PER_GPU=0)', () => {
  let sim: ClusterSimulator;
  let token: string;
  beforeAll(async () => {
    sim = await startClusterSimulator({
      workers: [
        { name: 'sim-a10g', gpuName: 'NVIDIA A10G', gpuCount: 2, gpuMemoryGb: 24 },
        { name: 'sim-a100', gpuName: 'NVIDIA A100-SXM4-80GB', gpuCount: 1, gpuMemoryGb: 80 },
      ],
      allowMultiReplicaPerGpu: false,
      modelLoadMs: 50,
    });
    token = await signIn(sim);
  });
  afterAll(() => sim.stop());

  const launch = (body: Json, waitReady = false) =>
    fetch(`${sim.url}/v1/models${waitReady ? '' : '?wait_ready=false'}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ ...LLM, ...body }),
    });
  const remove = (uid: string) => fetch(`${sim.url}/v1/models/${uid}`, { method: 'DELETE', headers: { authorization: `Bearer ${token}` } });

  it('fails a launch that needs more GPUs than are idle, and one asking for more than a machine has', async () => {
    expect((await launch({ model_uid: 'big-1', n_gpu: 2 }, true)).status).toBe(200);
    expect((await launch({ model_uid: 'big-2', n_gpu: 1 }, true)).status).toBe(200);
    expect(sim.gpus().every((gpu) => gpu.heldBy !== null)).toBe(true);

    const waited = await launch({ model_uid: 'big-3', n_gpu: 1 }, true);
    expect(waited.status).toBe(503);
    expect(await waited.json()).toEqual({ detail: 'No available slot found for the model' });

    const background = await launch({ model_uid: 'big-4', n_gpu: 1 });
    expect(background.status).toBe(200);
    const [failed] = (await (await fetch(`${sim.url}/v1/models/instances?model_uid=big-4`, { headers: { authorization: `Bearer ${token}` } })).json()) as Instance[];
    expect(failed?.status).toBe('ERROR');
    expect(failed?.replica_statuses[0]?.error_message).toBe('No available slot found for the model');

    const tooMany = await launch({ model_uid: 'big-5', n_gpu: 3 }, true);
    expect(tooMany.status).toBe(400);
    expect(((await tooMany.json()) as Json).detail).toBe('The parameter `n_gpu` must be greater than 0 and not greater than the number of GPUs: 2 on the machine.');

    for (const uid of ['big-1', 'big-2']) expect((await remove(uid)).status).toBe(200);
    expect((await launch({ model_uid: 'big-4', n_gpu: 1 }, true)).status).toBe(200);
    expect((await remove('big-4')).status).toBe(200);
  });
});

describe('cluster simulator authentication', () => {
  let sim: ClusterSimulator;
  beforeAll(async () => {
    sim = await startClusterSimulator({ adminPassword: 'admin-password', apiKey: 'xf-simulator-key', modelLoadMs: 10, tokenLatencyMs: 0 });
  });
  afterAll(() => sim.stop());

  it('requires a bearer on every route but the open ones, and keeps its own controls to the admin', async () => {
    const missing = await fetch(`${sim.url}/v1/models`);
    expect(missing.status).toBe(401);
    expect(missing.headers.get('www-authenticate')).toBe('Bearer scope="models:list"');
    expect(await missing.json()).toEqual({ detail: 'Could not validate credentials' });
    expect((await fetch(`${sim.url}/_simulator/state`)).status).toBe(401);
    expect((await fetch(`${sim.url}/_simulator/state`, { headers: { authorization: 'Bearer xf-simulator-key' } })).status).toBe(403);
    expect((await fetch(`${sim.url}/_simulator/state`, { headers: { authorization: `Bearer ${await signIn(sim)}` } })).status).toBe(200);
    expect((await fetch(`${sim.url}/v1/models`, { headers: { authorization: 'Bearer xf-simulator-key' } })).status).toBe(200);
    expect((await fetch(`${sim.url}/status`)).status).toBe(200);
    expect(await (await fetch(`${sim.url}/v1/cluster/auth`)).json()).toEqual({ auth: true });
    expect((await fetch(`${sim.url}/no/such/route`)).status).toBe(404);
  });

  it('refuses every token issued before a password reset, refresh tokens included', async () => {
    const signedIn = (await (await fetch(`${sim.url}/token`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'admin', password: 'admin-password' }) })).json()) as {
      access_token: string;
      refresh_token: string;
    };
    expect((await fetch(`${sim.url}/v1/cluster/version`, { headers: { authorization: `Bearer ${signedIn.access_token}` } })).status).toBe(200);
    sim.auth?.resetPassword('admin', 'another-password');
    expect((await fetch(`${sim.url}/v1/cluster/version`, { headers: { authorization: `Bearer ${signedIn.access_token}` } })).status).toBe(401);
    const refreshed = await fetch(`${sim.url}/v1/auth/refresh`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ refresh_token: signedIn.refresh_token }) });
    expect(refreshed.status).toBe(401);
  });

  it('runs without authentication when asked, as XINFERENCE_AUTH_ADVANCED=0', async () => {
    const open = await startClusterSimulator({ auth: false, modelLoadMs: 10 });
    try {
      expect(open.credentials).toBeUndefined();
      expect((await fetch(`${open.url}/v1/cluster/info`)).status).toBe(200);
      expect(await (await fetch(`${open.url}/v1/cluster/auth`)).json()).toEqual({ auth: false });
      expect((await fetch(`${open.url}/token`, { method: 'POST', body: '{}' })).status).toBe(404);
    } finally {
      await open.stop();
    }
  });
});
