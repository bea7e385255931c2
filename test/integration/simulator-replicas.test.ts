import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startClusterSimulator, type ClusterSimulator } from '../../dev/cluster-simulator.ts';
import { waitUntil } from '../helpers/net.ts';

/**
 * The cluster simulator's replicas as load tests drive them: a scale-up takes the model's load
 * time, requests go round robin over the ready replicas and are counted per replica, and a
 * replica's concurrency limit queues what exceeds it (the replica API's Xinference rules are in the
 * engine conformance suite, test/engine/).
 */

type Json = Record<string, unknown>;
type ReplicaState = { replica_id: number; requests: number; in_flight: number; queued: number; status: string };

const LOAD_MS = 150;
const LLM = { model_name: 'qwen2.5-instruct', model_type: 'LLM', model_engine: 'vllm', model_format: 'pytorch', model_size_in_billions: 7, quantization: 'none', n_gpu: 1 };

describe('cluster simulator replicas', () => {
  let sim: ClusterSimulator;
  let token: string;

  const call = (path: string, init: RequestInit = {}) => fetch(`${sim.url}${path}`, { ...init, headers: { authorization: `Bearer ${token}`, ...(init.headers as Record<string, string>) } });
  const post = (path: string, body: unknown, signal?: AbortSignal) =>
    call(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), ...(signal ? { signal } : {}) });
  const chat = (uid: string, signal?: AbortSignal) => post('/v1/chat/completions', { model: uid, messages: [{ role: 'user', content: 'Tell me about the sea' }] }, signal);
  const replicas = async (uid: string): Promise<ReplicaState[]> => {
    const state = (await (await call('/_simulator/state')).json()) as { models: Array<{ model_uid: string; replicas: ReplicaState[] }> };
    return state.models.find((model) => model.model_uid === uid)?.replicas ?? [];
  };

  async function serving(uid: string): Promise<void> {
    expect((await post('/v1/models?wait_ready=false', { ...LLM, model_uid: uid })).status).toBe(200);
    await waitUntil(async () => sim.running().includes(uid), `${uid} to serve`, 10_000);
  }

  beforeAll(async () => {
    sim = await startClusterSimulator({
      workers: [{ name: 'sim-a10g', gpuName: 'NVIDIA A10G', gpuCount: 4, gpuMemoryGb: 24 }],
      modelLoadMs: LOAD_MS,
      tokenLatencyMs: 10,
      completionTokens: 6,
    });
    const signedIn = await fetch(`${sim.url}/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: sim.credentials?.adminUser, password: sim.credentials?.adminPassword }),
    });
    token = ((await signedIn.json()) as { access_token: string }).access_token;
  });
  afterAll(() => sim.stop());

  it('takes the load time to add a replica, serves on the others meanwhile, then takes the ready replicas in turn, counting each one\'s requests', async () => {
    await serving('rr');
    const started = Date.now();
    const adding = post('/v1/models/rr/replicas', {});
    await waitUntil(async () => (await replicas('rr')).length === 2, 'the new replica to be listed', 5_000);
    for (let i = 0; i < 2; i++) expect((await chat('rr')).status).toBe(200);
    const added = await adding;
    expect(Date.now() - started).toBeGreaterThanOrEqual(LOAD_MS);
    expect(await added.json()).toMatchObject({ replica_id: 1, replica_model_uid: 'rr-rep1' });
    expect((await replicas('rr')).map((r) => [r.replica_id, r.requests])).toEqual([
      [0, 2],
      [1, 0],
    ]);
    for (let i = 0; i < 4; i++) expect((await chat('rr')).status).toBe(200);
    expect((await replicas('rr')).map((r) => [r.replica_id, r.requests, r.in_flight, r.queued])).toEqual([
      [0, 4, 0, 0],
      [1, 2, 0, 0],
    ]);
    expect(sim.requests['POST /v1/models/{model_uid}/replicas']).toBe(1);
    expect((await call('/v1/models/rr', { method: 'DELETE' })).status).toBe(200);
  });

  it('queues requests beyond a replica\'s concurrency limit, admits them as slots free, and drops those whose client left', async () => {
    await serving('queue');
    sim.setReplicaConcurrency(1);
    // Answers of over a second: the queue holds still while it is looked at.
    sim.setTokenLatencyMs(200);
    try {
      const first = chat('queue');
      await waitUntil(async () => (await replicas('queue'))[0]?.in_flight === 1, 'the first request to generate', 5_000);
      const second = chat('queue');
      const leaving = new AbortController();
      const third = chat('queue', leaving.signal).catch(() => 'aborted');
      await waitUntil(async () => (await replicas('queue'))[0]?.queued === 2, 'two requests to queue', 5_000);
      expect(sim.active()).toBe(1);
      leaving.abort();
      await waitUntil(async () => (await replicas('queue'))[0]?.queued === 1, 'the aborted request to leave the queue', 5_000);
      expect((await first).status).toBe(200);
      expect((await second).status).toBe(200);
      expect(await third).toBe('aborted');
      expect((await replicas('queue'))[0]).toMatchObject({ requests: 3, in_flight: 0, queued: 0 });

      // Lifting the limit over HTTP admits what waits.
      const waiting = [chat('queue'), chat('queue'), chat('queue')];
      await waitUntil(async () => (await replicas('queue'))[0]?.queued === 2, 'two requests to queue', 5_000);
      expect((await post('/_simulator/replica-concurrency', { limit: 0 })).status).toBe(400);
      expect(await (await post('/_simulator/replica-concurrency', { limit: null })).json()).toEqual({ limit: null });
      await waitUntil(async () => sim.active() === 3, 'every request to generate', 5_000);
      expect((await Promise.all(waiting)).map((r) => r.status)).toEqual([200, 200, 200]);
      expect(((await (await call('/_simulator/state')).json()) as { settings: Json }).settings.replica_concurrency).toBeNull();
    } finally {
      sim.setReplicaConcurrency(null);
      sim.setTokenLatencyMs(10);
      await call('/v1/models/queue', { method: 'DELETE' });
    }
  });

  it('fails the requests queued on a replica that is deleted', async () => {
    await serving('drop');
    expect((await post('/v1/models/drop/replicas', {})).status).toBe(200);
    sim.setReplicaConcurrency(1);
    sim.setTokenLatencyMs(200);
    try {
      // Round robin from replica 0: the first and third requests go to it, the third waits there.
      const generating = chat('drop');
      await waitUntil(async () => sim.active() === 1, 'the first request to generate', 5_000);
      const other = chat('drop');
      await waitUntil(async () => sim.active() === 2, 'the second request to generate', 5_000);
      const queued = chat('drop');
      await waitUntil(async () => (await replicas('drop'))[0]?.queued === 1, 'the third request to queue', 5_000);
      expect(await (await call('/v1/models/drop/replicas/0', { method: 'DELETE' })).json()).toEqual({ remaining_replicas: 1 });
      const answers = await Promise.all([generating, queued, other]);
      expect(answers.map((r) => r.status)).toEqual([500, 500, 200]);
      expect(((await answers[1]?.json()) as Json).detail).toMatch(/^Remote server unixsocket:\/\/\/.* closed$/);
    } finally {
      sim.setReplicaConcurrency(null);
      sim.setTokenLatencyMs(10);
      await call('/v1/models/drop', { method: 'DELETE' });
    }
  });
});
