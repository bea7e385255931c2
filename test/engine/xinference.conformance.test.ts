import { Ajv2020 } from 'ajv/dist/2020.js';
import got from 'got';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EngineError, ReplicaScaleError, versionAtLeast, workerIpFor, XinferenceClient, type ModelState } from '../../src/adapters/xinference.ts';
import { gpuTypeOf } from '../../src/clusters/gpu-names.ts';
import { startClusterSimulator } from '../../dev/cluster-simulator.ts';
import { engineUnderTest, poll, REAL_ENGINE, type EngineUnderTest } from './engine-under-test.ts';

/**
 * The engine conformance suite: what our engine client relies on in Xinference 3.x, checked
 * against the cluster simulator in `make test` and against a real cluster with
 * `XINFERENCE_URL=… make test-engine` (see engine-under-test.ts). M numbers are those of
 * ../shared/reviews/xinference-fidelity-d37b28c.md. Tests marked `simulator only` need failure
 * injection (crashes, out-of-memory loads, revoked credentials, the address ban) or would leave
 * the real cluster in a bad state; they are skipped against the real thing.
 */

type Json = Record<string, unknown>;
const simulatorOnly = it.skipIf(REAL_ENGINE);

let engine: EngineUnderTest;
let client: XinferenceClient;

beforeAll(async () => {
  engine = await engineUnderTest();
  client = engine.client();
});
afterAll(() => engine?.stop());

async function raw(path: string, init: RequestInit & { bearer?: string } = {}): Promise<{ status: number; body: Json; headers: Headers }> {
  const headers = new Headers(init.headers);
  if (init.bearer) headers.set('authorization', `Bearer ${init.bearer}`);
  if (init.body) headers.set('content-type', 'application/json');
  const response = await fetch(`${engine.url}${path}`, { ...init, headers });
  const text = await response.text();
  let body: Json;
  try {
    body = JSON.parse(text) as Json;
  } catch {
    body = { text };
  }
  return { status: response.status, body, headers: response.headers };
}

async function signIn(): Promise<{ access_token: string; refresh_token: string }> {
  const response = await raw('/token', { method: 'POST', body: JSON.stringify(engine.admin) });
  expect(response.status).toBe(200);
  return response.body as { access_token: string; refresh_token: string };
}

async function stopped(uid: string, target: XinferenceClient = client): Promise<void> {
  await poll(async () => ((await target.stop(uid)) === 'stopped' ? true : undefined), `${uid} to be gone`, engine.loadTimeoutMs, engine.pollMs);
}

async function ready(uid: string, target: XinferenceClient = client): Promise<void> {
  await poll(
    async () => {
      const state = await target.state(uid);
      if (state.state === 'error' || state.state === 'missing') throw new Error(`${uid} did not load: ${JSON.stringify(state)}`);
      return state.state === 'ready' ? true : undefined;
    },
    `${uid} to be ready`,
    engine.loadTimeoutMs,
    engine.pollMs,
  );
}

describe('M1: credentials and scopes', () => {
  it('refuses an API key on launch, delete, cancel and cluster info with 403, in Xinference words, and lets it list and read', async () => {
    const key = engine.apiKey;
    expect((await raw('/v1/models', { bearer: key })).status).toBe(200);
    expect((await raw('/v1/models/instances', { bearer: key })).status).toBe(200);
    expect((await raw('/v1/models/no-such-model/progress', { bearer: key })).status).toBe(200);
    const refused = [
      await raw('/v1/models', { method: 'POST', bearer: key, body: JSON.stringify({ model_name: 'qwen2.5-instruct', model_engine: 'vLLM' }) }),
      await raw('/v1/models/no-such-model', { method: 'DELETE', bearer: key }),
      await raw('/v1/models/no-such-model/cancel', { method: 'POST', bearer: key }),
      await raw('/v1/cluster/info', { bearer: key }),
    ];
    for (const response of refused) {
      expect(response.status).toBe(403);
      expect(response.body.detail).toBe('API keys can only access model query and inference endpoints');
    }
  });

  it('lets the admin user sign in at /token and manage models; the client checks every scope it needs', async () => {
    const { access_token: token } = await signIn();
    expect((await raw('/v1/models/no-such-model', { method: 'DELETE', bearer: token })).body.detail).toBe('Model not found in the model list, uid: no-such-model');
    expect((await raw('/v1/cluster/info', { bearer: token })).status).toBe(200);
    await client.checkManagementAccess();
    await client.checkInferenceKey(engine.apiKey);
    expect(await client.version()).toMatch(/^3\.\d+/);
  });

  it('answers 401 without a bearer, and leaves /status and /v1/cluster/auth open', async () => {
    const missing = await raw('/v1/models');
    expect(missing.status).toBe(401);
    expect(missing.body.detail).toBe('Could not validate credentials');
    expect(missing.headers.get('www-authenticate')).toMatch(/^Bearer/);
    expect((await raw('/status')).status).toBe(200);
    expect((await raw('/v1/cluster/auth')).body).toEqual({ auth: true });
  });

  simulatorOnly('names the scope a management user lacks (simulator only)', async () => {
    engine.simulator?.auth?.addUser({ username: 'reader', password: 'reader-password', permissions: ['models:list', 'models:read'] });
    const reader = new XinferenceClient(engine.url, { management: { username: 'reader', password: 'reader-password' } });
    await expect(reader.checkManagementAccess()).rejects.toThrow(/lacks the scopes models:write, admin/);
    const wrong = new XinferenceClient(engine.url, { management: { username: 'reader', password: 'not-it' } });
    await expect(wrong.checkManagementAccess()).rejects.toThrow(/refused the username or password of reader \(401: Incorrect username or password\)/);
    await expect(client.checkInferenceKey('xf-not-a-key-of-this-cluster')).rejects.toThrow(/refused the API key/);
  });
});

describe('keys limited to some models, expired and banned keys, a forced password change', () => {
  it('checks a key\'s model access before it looks the model up, so registration can tell which model types the key may call', async () => {
    // The suite's key may call at least LLMs; an unknown uid is "not found", never 403, for a type the key may call.
    const types = await client.checkInferenceKey(engine.apiKey);
    expect(types).toContain('LLM');
    const chat = await raw('/v1/chat/completions', { method: 'POST', bearer: engine.apiKey, body: JSON.stringify({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] }) });
    expect([400, 404]).toContain(chat.status);
  });

  simulatorOnly('refuses a key limited to one model type on every other type\'s route with 403, in Xinference words (simulator only)', async () => {
    engine.simulator?.auth?.addApiKey('xf-conformance-embeddings-only', 'admin', [{ permission_type: 'model_type', permission_value: 'embedding' }]);
    const chat = await raw('/v1/chat/completions', {
      method: 'POST',
      bearer: 'xf-conformance-embeddings-only',
      body: JSON.stringify({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(chat).toMatchObject({ status: 403, body: { detail: 'API key does not have access to model: no-such-model' } });
    expect(await client.checkInferenceKey('xf-conformance-embeddings-only')).toEqual(['embedding']);
  });

  simulatorOnly('answers an expired key 401 and, after five uses of it from one address, bans the key there with 429 (simulator only)', async () => {
    const auth = engine.simulator?.auth;
    if (!auth) throw new Error('no simulator');
    auth.addApiKey('xf-conformance-expiring', 'admin');
    auth.expireApiKey('xf-conformance-expiring');
    for (let i = 0; i < 5; i++) expect((await raw('/v1/models', { bearer: 'xf-conformance-expiring' })).body.detail).toBe('API key has expired');
    auth.expireApiKey('xf-conformance-expiring', Date.now() + 3_600_000);
    expect(await raw('/v1/models', { bearer: 'xf-conformance-expiring' })).toMatchObject({ status: 429, body: { detail: 'Too many failed attempts for this key.' } });
  });

  simulatorOnly('signs in a user who must change their password with the flag, and refuses their token and their keys with 403; the client refuses the login (simulator only)', async () => {
    const auth = engine.simulator?.auth;
    if (!auth) throw new Error('no simulator');
    auth.addUser({ username: 'flagged', password: 'flagged-password', permissions: ['admin'], mustChangePassword: true });
    auth.addApiKey('xf-conformance-flagged', 'flagged');
    const signedIn = await raw('/token', { method: 'POST', body: JSON.stringify({ username: 'flagged', password: 'flagged-password' }) });
    expect(signedIn).toMatchObject({ status: 200, body: { must_change_password: true } });
    for (const bearer of [signedIn.body.access_token as string, 'xf-conformance-flagged']) {
      expect(await raw('/v1/models', { bearer })).toMatchObject({ status: 403, body: { detail: 'Password change required before using this account.' } });
    }
    const flagged = new XinferenceClient(engine.url, { management: { username: 'flagged', password: 'flagged-password' } });
    await expect(flagged.checkManagementAccess()).rejects.toThrow(/requires flagged to change its password/);
  });
});

describe('M2: expiring tokens and the address ban', () => {
  it('gives access tokens an expiry, and rotates the refresh token: a used one is refused', async () => {
    const { access_token: access, refresh_token: refresh } = await signIn();
    const { exp } = JSON.parse(Buffer.from(access.split('.')[1] ?? '', 'base64url').toString()) as { exp: number };
    expect(exp * 1000).toBeGreaterThan(Date.now());
    const renewed = await raw('/v1/auth/refresh', { method: 'POST', body: JSON.stringify({ refresh_token: refresh }) });
    expect(renewed.status).toBe(200);
    expect(renewed.body).toMatchObject({ access_token: expect.any(String), refresh_token: expect.any(String), token_type: 'bearer' });
    expect(renewed.body.refresh_token).not.toBe(refresh);
    const reused = await raw('/v1/auth/refresh', { method: 'POST', body: JSON.stringify({ refresh_token: refresh }) });
    expect(reused.status).toBe(401);
    expect(reused.body.detail).toBe('Invalid or expired refresh token');
  });

  simulatorOnly('refreshes the access token before it expires: no call is ever refused across several lifetimes (simulator only)', async () => {
    const short = await engineUnderTest({ auth: { accessTokenExpireSeconds: 2 } });
    try {
      const shortClient = short.client();
      const auth = short.simulator?.auth;
      const started = Date.now();
      while (Date.now() - started < 5_000) {
        expect(await shortClient.state('no-such-model')).toEqual({ state: 'missing' });
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(auth?.refusals[401]).toBe(0);
      expect(short.simulator?.requests['POST /v1/auth/refresh']).toBeGreaterThanOrEqual(2);
      expect(short.simulator?.requests['POST /token']).toBe(1);
    } finally {
      await short.stop();
    }
  });

  simulatorOnly('bans an address after 10 invalid bearers in 300 s: 429 on every authenticated route, valid credentials included (simulator only)', async () => {
    const banned = await startClusterSimulator({ modelLoadMs: 10 });
    try {
      const call = (bearer: string) => fetch(`${banned.url}/v1/models`, { headers: { authorization: `Bearer ${bearer}` } });
      for (let i = 0; i < 9; i++) expect((await call(`xf-invalid-${i}`)).status).toBe(401);
      expect((await call(banned.credentials?.apiKey as string)).status).toBe(200);
      expect((await call('xf-invalid-9')).status).toBe(401);
      const refused = await call(banned.credentials?.apiKey as string);
      expect(refused.status).toBe(429);
      expect(await refused.json()).toEqual({ detail: 'Too many failed attempts. IP temporarily banned.' });
      expect((await fetch(`${banned.url}/status`)).status).toBe(200);
    } finally {
      await banned.stop();
    }
  });

  simulatorOnly('stops at a refused credential: one rejected bearer, one refused sign-in, then no call at all (simulator only)', async () => {
    const isolated = await engineUnderTest();
    try {
      const reasons: string[] = [];
      const watched = isolated.client({ onCredentialsRejected: (reason) => void reasons.push(reason) });
      const sim = isolated.simulator;
      const auth = sim?.auth;
      if (!sim || !auth) throw new Error('no simulator');
      expect(await watched.state('no-such-model')).toEqual({ state: 'missing' });
      auth.resetPassword(isolated.admin.username, 'a-new-password-the-platform-does-not-know');
      const total = () => Object.values(sim.requests).reduce((sum, n) => sum + n, 0);
      const before = { invalid: auth.invalidBearers, signIns: sim.requests['POST /token'] ?? 0, requests: total() };

      await expect(watched.state('no-such-model')).rejects.toMatchObject({ kind: 'credentials' });
      const afterRejection = total();
      for (let i = 0; i < 5; i++) await expect(watched.launch(isolated.launchSpec())).rejects.toBeInstanceOf(EngineError);
      expect(total()).toBe(afterRejection);
      expect(auth.invalidBearers - before.invalid).toBe(1);
      expect((sim.requests['POST /token'] ?? 0) - before.signIns).toBe(1);
      expect(reasons).toEqual([expect.stringMatching(/refused the username or password of admin \(401: Incorrect username or password\)/)]);
      expect(auth.bannedAddresses()).toEqual([]);
    } finally {
      await isolated.stop();
    }
  });
});

describe('M3: readiness', () => {
  it('says ready only once every replica is READY and the model answers: then describe and chat succeed', async () => {
    const spec = engine.launchSpec();
    expect(await client.launch(spec)).toBe('launched');
    let sawReadyInstanceLoading = false;
    let sawLoadingAnswer = false;
    try {
      await poll(
        async () => {
          const state = await client.state(spec.modelUid);
          if (state.state === 'error' || state.state === 'missing') throw new Error(`the model did not load: ${JSON.stringify(state)}`);
          if (state.state === 'ready') return true;
          const [instance] = (await raw(`/v1/models/instances?model_uid=${spec.modelUid}`, { bearer: engine.apiKey })).body as unknown as Array<{
            status: string;
            replica_statuses: Array<{ status: string }>;
          }>;
          // One snapshot: the instance READY while its replica still loads.
          if (instance?.status === 'READY' && instance.replica_statuses[0]?.status === 'CREATING') sawReadyInstanceLoading = true;
          const described = await raw(`/v1/models/${spec.modelUid}`, { bearer: engine.apiKey });
          if (described.status === 503) {
            expect(described.headers.get('retry-after')).toBe('30');
            expect(described.body.detail).toMatch(/^Model is loading, please retry later/);
            sawLoadingAnswer = true;
          }
          return undefined;
        },
        'the model to be ready',
        engine.loadTimeoutMs,
        engine.pollMs,
      );
      expect((await raw(`/v1/models/${spec.modelUid}`, { bearer: engine.apiKey })).status).toBe(200);
      const chat = await raw('/v1/chat/completions', {
        method: 'POST',
        bearer: engine.apiKey,
        body: JSON.stringify({ model: spec.modelUid, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 8 }),
      });
      expect(chat.status).toBe(200);
      expect(chat.body.object).toBe('chat.completion');
      // The instance is READY before the engine has loaded (vLLM), and the model answers 503 until
      // routed; the simulator always shows both (a real cluster, when the load is slow enough).
      if (!REAL_ENGINE) expect({ sawReadyInstanceLoading, sawLoadingAnswer }).toEqual({ sawReadyInstanceLoading: true, sawLoadingAnswer: true });
    } finally {
      await stopped(spec.modelUid);
    }
  });
});

describe('M5: termination', () => {
  it('answers a DELETE during a launch with 400 naming the replica; the client waits the launch out, deletes, and confirms the uid gone', async () => {
    const spec = engine.launchSpec();
    const cancels = engine.simulator?.requests['POST /v1/models/{model_uid}/cancel'] ?? 0;
    await client.launch(spec);
    const early = await raw(`/v1/models/${spec.modelUid}`, { method: 'DELETE', bearer: (await signIn()).access_token });
    expect(early.status).toBe(400);
    expect(early.body.detail).toBe(`Model not found in the model list, uid: ${spec.modelUid}-rep0`);
    expect(await client.stop(spec.modelUid)).toBe('pending');
    await stopped(spec.modelUid);
    expect((await raw(`/v1/models/instances?model_uid=${spec.modelUid}`, { bearer: engine.apiKey })).body).toEqual([]);
    if (engine.simulator) {
      expect(engine.simulator.requests['POST /v1/models/{model_uid}/cancel'] ?? 0).toBe(cancels);
      expect(engine.simulator.gpus().flatMap((gpu) => gpu.holders).filter((uid) => uid.startsWith(spec.modelUid))).toEqual([]);
    }
  });

  simulatorOnly('makes a cancel after the engine load() a no-op that forgets the uid: the model loads on, unreachable, holding its GPU (simulator only)', async () => {
    const isolated = await engineUnderTest();
    try {
      const sim = isolated.simulator;
      if (!sim) throw new Error('no simulator');
      const spec = isolated.launchSpec();
      await isolated.client().launch(spec);
      const signedIn = await fetch(`${isolated.url}/token`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(isolated.admin) });
      const { access_token: token } = (await signedIn.json()) as { access_token: string };
      const call = async (path: string, method = 'GET') => {
        const response = await fetch(`${isolated.url}${path}`, { method, headers: { authorization: `Bearer ${token}` } });
        return { status: response.status, body: (await response.json()) as Json & Array<{ status: string; replica_statuses: Array<{ status: string }> }> };
      };
      await poll(async () => ((await call(`/v1/models/instances?model_uid=${spec.modelUid}`)).body[0]?.status === 'READY' ? true : undefined), 'the instance to be READY', isolated.loadTimeoutMs, isolated.pollMs);
      expect((await call(`/v1/models/${spec.modelUid}/cancel`, 'POST')).status).toBe(200);
      expect((await call(`/v1/models/${spec.modelUid}`)).status).toBe(400);
      expect((await call(`/v1/models/${spec.modelUid}`, 'DELETE')).body.detail).toBe(`Model not found in the model list, uid: ${spec.modelUid}`);
      await poll(
        async () => ((await call(`/v1/models/instances?model_uid=${spec.modelUid}`)).body[0]?.replica_statuses[0]?.status === 'READY' ? true : undefined),
        'the orphan to finish loading',
        isolated.loadTimeoutMs,
        isolated.pollMs,
      );
      expect(sim.gpus().some((gpu) => gpu.holders.includes(`${spec.modelUid}-rep0`))).toBe(true);
      expect(sim.running()).not.toContain(spec.modelUid);
    } finally {
      await isolated.stop();
    }
  });
});

describe('M9: auto-recovery', () => {
  simulatorOnly('reports a dead model recovering (TERMINATING, ERROR) until it is READY again, never missing (simulator only)', async () => {
    const sim = engine.simulator;
    if (!sim) throw new Error('no simulator');
    const spec = engine.launchSpec();
    await client.launch(spec);
    await ready(spec.modelUid);
    expect(sim.crash(spec.modelUid)).toBe(true);
    const seen: ModelState['state'][] = [];
    await poll(
      async () => {
        const state = await client.state(spec.modelUid);
        seen.push(state.state);
        return state.state === 'ready' ? true : undefined;
      },
      'the model to recover',
      engine.loadTimeoutMs,
      engine.pollMs,
    );
    expect(seen).toContain('recovering');
    expect(seen).not.toContain('missing');
    expect(seen).not.toContain('error');
    expect(sim.terminations.map((t) => t.modelUid)).not.toContain(spec.modelUid);
    await stopped(spec.modelUid);
  });

  simulatorOnly('answers inference 500 while the dead replica is torn down, then 503 while it loads again; describe 400; a DELETE 400 "is launching", which the client waits out (simulator only)', async () => {
    const sim = engine.simulator;
    if (!sim) throw new Error('no simulator');
    const spec = engine.launchSpec();
    await client.launch(spec);
    await ready(spec.modelUid);
    const { access_token: token } = await signIn();
    const chat = () => raw('/v1/chat/completions', { method: 'POST', bearer: engine.apiKey, body: JSON.stringify({ model: spec.modelUid, messages: [{ role: 'user', content: 'hi' }] }) });
    expect(sim.crash(spec.modelUid)).toBe(true);
    // core/worker.py, get_model: "stopping" is a RuntimeError (500), "loading" a ModelNotReadyError (503).
    expect(await chat()).toMatchObject({ status: 500, body: { detail: `Model ${spec.modelUid}-rep0 is in stopping state` } });
    expect((await raw(`/v1/models/${spec.modelUid}`, { bearer: token })).status).toBe(400);
    await poll(async () => ((await chat()).status === 503 ? true : undefined), 'the relaunch', engine.loadTimeoutMs, 5);
    expect(await raw(`/v1/models/${spec.modelUid}`, { method: 'DELETE', bearer: token })).toMatchObject({ status: 400, body: { detail: `${spec.modelUid}-rep0 is launching` } });
    expect(await client.stop(spec.modelUid)).toBe('pending');
    await ready(spec.modelUid);
    await stopped(spec.modelUid);
  });

  simulatorOnly('past its recover budget the model is marked dead: TERMINATED, dropped from the list, its GPU freed, and a DELETE answers not found (simulator only)', async () => {
    const sim = engine.simulator;
    if (!sim) throw new Error('no simulator');
    const spec = engine.launchSpec();
    await client.launch(spec);
    await ready(spec.modelUid);
    sim.crash(spec.modelUid, { recover: false });
    // core/supervisor.py, mark_replica_dead; core/status_guard.py drops TERMINATED instances.
    await poll(async () => ((await client.state(spec.modelUid)).state === 'missing' ? true : undefined), 'the model to be dropped', 5_000, 20);
    expect(sim.gpus().some((gpu) => gpu.holders.includes(`${spec.modelUid}-rep0`))).toBe(false);
    const { access_token: token } = await signIn();
    expect(await raw(`/v1/models/${spec.modelUid}`, { method: 'DELETE', bearer: token })).toMatchObject({
      status: 400,
      body: { detail: `Model not found in the model list, uid: ${spec.modelUid}` },
    });
    const chat = await raw('/v1/chat/completions', { method: 'POST', bearer: engine.apiKey, body: JSON.stringify({ model: spec.modelUid, messages: [{ role: 'user', content: 'hi' }] }) });
    expect(chat.status).toBe(404);
    expect(await client.stop(spec.modelUid)).toBe('stopped');
  });
});

describe('M7, M11: launches the engine refuses after accepting them', () => {
  it('accepts a launch of a model Xinference does not have, then fails it on the instance', async () => {
    const spec = { ...engine.launchSpec(), modelName: 'gemma-2-it', modelSizeInBillions: 9 };
    expect(await client.launch(spec)).toBe('launched');
    const state = await poll(
      async () => {
        const current = await client.state(spec.modelUid);
        return current.state === 'error' ? current : undefined;
      },
      'the launch to fail',
      engine.loadTimeoutMs,
      engine.pollMs,
    );
    expect(state).toMatchObject({ capacity: false, message: expect.stringMatching(/Model not found, name: gemma-2-it/) });
    expect(await client.stop(spec.modelUid)).toBe('stopped');
  });

  simulatorOnly('classifies an out-of-memory load, and a second vLLM model on a shared GPU, as capacity failures (simulator only)', async () => {
    const sim = engine.simulator;
    if (!sim) throw new Error('no simulator');
    const oom = engine.launchSpec();
    sim.failNextLaunch('oom', oom.modelUid);
    await client.launch(oom);
    const failed = await poll(async () => {
      const state = await client.state(oom.modelUid);
      return state.state === 'error' ? state : undefined;
    }, 'the load to fail', engine.loadTimeoutMs, engine.pollMs);
    expect(failed).toMatchObject({ capacity: true, message: expect.stringMatching(/^CUDA out of memory/) });

    // GPUs are shared by default: the only H100 takes a second vLLM model, which cannot start.
    const first = { ...engine.launchSpec(), workerAddress: 'sim-h100:30001' };
    const second = { ...engine.launchSpec(), workerAddress: 'sim-h100:30001' };
    await client.launch(first);
    await ready(first.modelUid);
    await client.launch(second);
    const crowded = await poll(async () => {
      const state = await client.state(second.modelUid);
      return state.state === 'error' ? state : undefined;
    }, 'the second load to fail', engine.loadTimeoutMs, engine.pollMs);
    expect(crowded).toMatchObject({ capacity: true, message: expect.stringMatching(/less than desired GPU memory utilization/) });
    await stopped(first.modelUid);
  });
});

describe('model events (GET /v1/models/{uid}/events)', () => {
  it('lists a model\'s events oldest first as {event_type, event_ts, event_content}: a launch is INFO "Launch model"; an unknown uid has none; an API key may read them', async () => {
    const spec = { ...engine.launchSpec(), modelName: 'gemma-2-it', modelSizeInBillions: 9 };
    const before = Math.floor(Date.now() / 1000);
    await client.launch(spec);
    await poll(async () => ((await client.state(spec.modelUid)).state === 'error' ? true : undefined), 'the launch to fail', engine.loadTimeoutMs, engine.pollMs);
    const answered = await raw(`/v1/models/${spec.modelUid}/events`, { bearer: engine.apiKey });
    expect(answered.status).toBe(200);
    const listed = answered.body as unknown as Array<{ event_type: string; event_ts: number; event_content: string }>;
    // core/event.py: the EventType's name, whole seconds, the text; core/worker.py reports the launch before the model is looked up.
    expect(listed[0]).toEqual({ event_type: 'INFO', event_ts: expect.any(Number), event_content: 'Launch model' });
    for (const event of listed) {
      expect(Object.keys(event).sort()).toEqual(['event_content', 'event_ts', 'event_type']);
      expect(['INFO', 'WARNING', 'ERROR']).toContain(event.event_type);
      expect(Number.isInteger(event.event_ts)).toBe(true);
    }
    // The engine's clock may differ from ours: a minute either way.
    expect(listed[0]?.event_ts).toBeGreaterThanOrEqual(before - 60);
    expect(listed[0]?.event_ts).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000) + 60);
    const events = await client.events(spec.modelUid);
    expect(events[0]).toEqual({ level: 'info', occurredAt: new Date((listed[0]?.event_ts ?? 0) * 1000), message: 'Launch model' });
    expect(await client.events(`conformance-unknown-${spec.modelUid}`)).toEqual([]);
    await stopped(spec.modelUid);
  });

  simulatorOnly('records a failed load\'s cleanup, a recreation under a bounded recover budget, the relaunch and an inference error, under the model uid (simulator only)', async () => {
    const isolated = await engineUnderTest({ autoRecoverLimit: 2 });
    try {
      const sim = isolated.simulator;
      if (!sim) throw new Error('no simulator');
      const target = isolated.client();
      const oom = isolated.launchSpec();
      sim.failNextLaunch('oom', oom.modelUid);
      await target.launch(oom);
      await poll(async () => ((await target.state(oom.modelUid)).state === 'error' ? true : undefined), 'the load to fail', isolated.loadTimeoutMs, isolated.pollMs);
      // A failed load is no ERROR event: its error is the replica's error_message (core/supervisor.py, _launch_one_model).
      expect((await target.events(oom.modelUid)).map((e) => [e.level, e.message])).toEqual([
        ['info', 'Launch model'],
        ['info', 'Terminate model'],
      ]);
      const spec = isolated.launchSpec();
      await target.launch(spec);
      await poll(async () => ((await target.state(spec.modelUid)).state === 'ready' ? true : undefined), 'the model to load', isolated.loadTimeoutMs, isolated.pollMs);
      sim.crash(spec.modelUid);
      const chat = await fetch(`${isolated.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${isolated.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: spec.modelUid, messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(chat.status).toBe(500);
      await poll(async () => ((await target.state(spec.modelUid)).state === 'ready' ? true : undefined), 'the model to recover', isolated.loadTimeoutMs, isolated.pollMs);
      expect((await target.events(spec.modelUid)).map((e) => [e.level, e.message])).toEqual([
        ['info', 'Launch model'],
        ['error', `Model ${spec.modelUid}-rep0 is in stopping state`],
        ['warning', 'Recreate model'],
        ['info', 'Launch model'],
      ]);
      await stopped(spec.modelUid, target);
      expect((await target.events(spec.modelUid)).at(-1)).toMatchObject({ level: 'info', message: 'Terminate model' });
    } finally {
      await isolated.stop();
    }
  });
});

describe('M15, M16: workers', () => {
  it('reports each worker GPU by its raw NVML name, which the GPU name table knows', async () => {
    const workers = await client.workers();
    expect(workers.length).toBeGreaterThan(0);
    for (const worker of workers) expect(gpuTypeOf(worker.gpuName), `GPU name "${worker.gpuName}" of ${worker.address}`).toBeDefined();
    if (!REAL_ENGINE) expect(workers.map((w) => w.gpuName)).toEqual(['NVIDIA A10G', 'NVIDIA H100 80GB HBM3']);
  });

  simulatorOnly('places a launch on the exact worker of a host:port on 3.2, among workers sharing a host, IPv6 included (simulator only)', async () => {
    const shared = await engineUnderTest({
      workers: [
        { name: 'a', address: '10.0.0.5:30001', gpuName: 'NVIDIA L4', gpuCount: 1, gpuMemoryGb: 24 },
        { name: 'b', address: '10.0.0.5:30002', gpuName: 'NVIDIA L4', gpuCount: 1, gpuMemoryGb: 24 },
        { name: 'c', address: '[fd00::7]:30001', gpuName: 'NVIDIA L4', gpuCount: 1, gpuMemoryGb: 24 },
      ],
    });
    try {
      const placed = shared.client({ engineVersion: '3.2.0' });
      for (const address of ['10.0.0.5:30002', '[fd00::7]:30001']) {
        const spec = { ...shared.launchSpec(), workerAddress: address };
        await placed.launch(spec);
        const [instance] = (await (await fetch(`${shared.url}/v1/models/instances?model_uid=${spec.modelUid}`, { headers: { authorization: `Bearer ${shared.apiKey}` } })).json()) as Array<{
          replica_statuses: Array<{ worker_address: string }>;
        }>;
        expect(instance?.replica_statuses[0]?.worker_address).toBe(address);
      }
      expect(workerIpFor('[fd00::7]:30001', '3.1.0')).toBe('fd00::7');
      expect(workerIpFor('10.0.0.5:30002', '3.1.2')).toBe('10.0.0.5');
      expect(workerIpFor('10.0.0.5:30002', '3.2.1')).toBe('10.0.0.5:30002');
    } finally {
      await shared.stop();
    }
  });
});

/** One second of a 440 Hz tone, 16 kHz 16-bit mono WAV: audio a real Whisper can decode. */
function toneWav(seconds = 1, rate = 16_000): Buffer {
  const data = Buffer.alloc(seconds * rate * 2);
  for (let i = 0; i < seconds * rate; i++) data.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / rate)), i * 2);
  const header = Buffer.alloc(44);
  header.write('RIFF', 0, 'latin1');
  header.writeUInt32LE(36 + data.length, 4);
  header.write('WAVEfmt ', 8, 'latin1');
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20);
  header.writeUInt16LE(1, 22);
  header.writeUInt32LE(rate, 24);
  header.writeUInt32LE(rate * 2, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write('data', 36, 'latin1');
  header.writeUInt32LE(data.length, 40);
  return Buffer.concat([header, data]);
}

describe('M4, M6, M12, M13: inference answers that differ from the hosted API (the proxy completes them)', () => {
  const uids: Partial<Record<'llm' | 'embedding' | 'image' | 'audio', string>> = {};
  const needs = (kind: 'embedding' | 'image' | 'audio') => {
    const uid = uids[kind];
    if (!uid) throw new Error(`no ${kind} model`);
    return uid;
  };
  // Against a real cluster, a kind is tested only when XINFERENCE_TEST_<KIND>_MODEL names a model.
  const withModel = (kind: 'embedding' | 'image' | 'audio') => it.skipIf(REAL_ENGINE && !process.env[`XINFERENCE_TEST_${kind.toUpperCase()}_MODEL`]);
  const post = (path: string, body: Json) => raw(path, { method: 'POST', bearer: engine.apiKey, body: JSON.stringify(body) });

  beforeAll(async () => {
    // vLLM takes 90% of its GPU's memory at start-up: the other models are placed once it has.
    const llm = { ...engine.launchSpec(), ...(REAL_ENGINE ? {} : { workerAddress: 'sim-a10g:30001' }) };
    await client.launch(llm);
    uids.llm = llm.modelUid;
    await ready(llm.modelUid);
    const others = (['embedding', 'image', 'audio'] as const).flatMap((kind) => {
      const spec = engine.launchSpecFor(kind);
      return spec ? [{ kind, spec }] : [];
    });
    for (const { kind, spec } of others) {
      await client.launch(spec);
      uids[kind] = spec.modelUid;
    }
    await Promise.all(others.map(({ spec }) => ready(spec.modelUid)));
  }, REAL_ENGINE ? 45 * 60_000 : 60_000);
  afterAll(async () => {
    await Promise.all(Object.values(uids).map((uid) => stopped(uid)));
  }, REAL_ENGINE ? 10 * 60_000 : 30_000);

  it('M12: answers any logit_bias but null with 501 "Not implemented", and drops n: one choice', async () => {
    const messages = [{ role: 'user', content: 'Say hello' }];
    for (const logitBias of [{}, { '100': 5 }]) {
      const refused = await post('/v1/chat/completions', { model: uids.llm, messages, logit_bias: logitBias, max_tokens: 4 });
      expect(refused.status).toBe(501);
      expect(refused.body).toEqual({ detail: 'Not implemented' });
    }
    const answered = await post('/v1/chat/completions', { model: uids.llm, messages, logit_bias: null, n: 2, max_tokens: 4 });
    expect(answered.status).toBe(200);
    expect(answered.body.choices).toHaveLength(1);
  });

  withModel('embedding')('M13: ignores encoding_format base64 and answers float lists', async () => {
    const answered = await post('/v1/embeddings', { model: needs('embedding'), input: ['first', 'second'], encoding_format: 'base64' });
    expect(answered.status).toBe(200);
    const data = answered.body.data as Array<{ embedding: unknown }>;
    expect(data).toHaveLength(2);
    for (const item of data) {
      expect(Array.isArray(item.embedding)).toBe(true);
      expect((item.embedding as unknown[]).every((value) => typeof value === 'number')).toBe(true);
    }
  });

  withModel('image')('M4: answers an image url as a path on the worker’s disk, and b64_json as base64 JPEG (PNG only with transparency)', async () => {
    const byDefault = await post('/v1/images/generations', { model: needs('image'), prompt: 'a lighthouse', size: '256x256' });
    expect(byDefault.status).toBe(200);
    const [asUrl] = byDefault.body.data as Array<{ url: string | null; b64_json: string | null }>;
    expect(asUrl?.b64_json).toBeNull();
    expect(asUrl?.url).toMatch(/^\/.*\/image\/[0-9a-f]{32}\.(jpg|png)$/);
    const asBase64 = await post('/v1/images/generations', { model: needs('image'), prompt: 'a lighthouse', size: '256x256', response_format: 'b64_json' });
    const [image] = asBase64.body.data as Array<{ url: string | null; b64_json: string }>;
    expect(image?.url).toBeNull();
    const bytes = Buffer.from(image?.b64_json ?? '', 'base64');
    const jpeg = bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff;
    const png = bytes.subarray(0, 4).toString('latin1') === '\u0089PNG';
    expect(jpeg || png).toBe(true);
  });

  withModel('audio')('M6: transcribes json and verbose_json (segments, duration), answers text, srt and vtt 500, and labels every answer JSON', async () => {
    const transcribe = async (format?: string) => {
      const form = new FormData();
      form.set('model', needs('audio'));
      form.set('file', new Blob([toneWav()], { type: 'audio/wav' }), 'tone.wav');
      if (format) form.set('response_format', format);
      const response = await fetch(`${engine.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${engine.apiKey}` }, body: form });
      return { status: response.status, type: response.headers.get('content-type'), body: (await response.json()) as Json };
    };
    const plain = await transcribe();
    expect(plain).toMatchObject({ status: 200, type: expect.stringMatching(/^application\/json/), body: { text: expect.any(String) } });
    const verbose = await transcribe('verbose_json');
    expect(verbose).toMatchObject({ status: 200, type: expect.stringMatching(/^application\/json/), body: { text: expect.any(String), duration: expect.any(Number), segments: expect.any(Array) } });
    for (const format of ['text', 'srt', 'vtt']) {
      const refused = await transcribe(format);
      expect(refused.status, format).toBe(500);
      expect(refused.type).toMatch(/^application\/json/);
      expect(refused.body.detail).toMatch(new RegExp(`Unsupported response format: ${format}`));
    }
  });
});

describe('tools, structured output and completions on vLLM (the test model calls tools)', () => {
  let llm = '';
  let withoutTools: string | undefined;
  const ajv = new Ajv2020({ strict: false });
  const post = (path: string, body: Json) => raw(path, { method: 'POST', bearer: engine.apiKey, body: JSON.stringify(body) });
  /** The data of a streamed answer's events, in order (`[DONE]` as a string). */
  async function streamed(path: string, body: Json): Promise<unknown[]> {
    const response = await fetch(`${engine.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${engine.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...body, stream: true }),
    });
    expect(response.status).toBe(200);
    return (await response.text())
      .split(/\r?\n\r?\n/)
      .filter((event) => event.startsWith('data: '))
      .map((event) => event.slice('data: '.length))
      .map((data) => (data === '[DONE]' ? data : (JSON.parse(data) as unknown)));
  }
  type Chunk = { object: string; choices: Array<{ delta: { content?: string | null; tool_calls?: Array<{ index: number; id?: string; type?: string; function: { name?: string; arguments?: string } }> }; finish_reason: string | null }>; usage?: Json | null };

  const weather = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Get the current weather in a city', parameters: weather } }];
  const ask = [{ role: 'user', content: 'Use the get_weather tool to get the weather in Paris.' }];
  // Greedy decoding, so a real model writes the same answer whole and streamed.
  const chat = (body: Json) => ({ model: llm, messages: ask, temperature: 0, max_tokens: 256, ...body });

  beforeAll(async () => {
    const spec = { ...engine.launchSpec(), ...(REAL_ENGINE ? {} : { workerAddress: 'sim-a10g:30001' }) };
    await client.launch(spec);
    llm = spec.modelUid;
    const other = engine.launchSpecFor('chat_without_tools');
    if (other) {
      await client.launch(other);
      withoutTools = other.modelUid;
    }
    await Promise.all([llm, withoutTools].flatMap((uid) => (uid ? [ready(uid)] : [])));
  }, REAL_ENGINE ? 30 * 60_000 : 60_000);
  afterAll(async () => {
    await Promise.all([llm, withoutTools].flatMap((uid) => (uid ? [stopped(uid)] : [])));
  }, REAL_ENGINE ? 10 * 60_000 : 30_000);

  it('answers tools with a tool call: id call_…, type function, the tool’s name, arguments valid against its schema, content "" and finish_reason tool_calls', async () => {
    const answered = await post('/v1/chat/completions', chat({ tools }));
    expect(answered.status).toBe(200);
    const [choice] = answered.body.choices as Array<{ message: { content: unknown; tool_calls: Array<{ id: string; type: string; function: { name: string; arguments: string } }> }; finish_reason: string }>;
    expect(choice?.finish_reason).toBe('tool_calls');
    expect(choice?.message.content).toBe('');
    expect(choice?.message.tool_calls).toHaveLength(1);
    const [call] = choice?.message.tool_calls ?? [];
    expect(call).toMatchObject({ id: expect.stringMatching(/^call_/), type: 'function', function: { name: 'get_weather' } });
    expect(ajv.validate(weather, JSON.parse(call?.function.arguments ?? ''))).toBe(true);

    // Streamed: the call in deltas by index (Xinference sends it whole), then finish_reason
    // tool_calls, the usage chunk and [DONE]; put together it is the call answered whole.
    const events = await streamed('/v1/chat/completions', chat({ tools, stream_options: { include_usage: true } }));
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1) as Chunk[];
    const deltas = chunks.flatMap((chunk) => chunk.choices[0]?.delta.tool_calls ?? []);
    expect(deltas.every((delta) => delta.index === 0)).toBe(true);
    expect(deltas[0]).toMatchObject({ id: expect.stringMatching(/^call_/), type: 'function', function: { name: 'get_weather' } });
    expect(JSON.parse(deltas.map((delta) => delta.function.arguments ?? '').join(''))).toEqual(JSON.parse(call?.function.arguments ?? ''));
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe('tool_calls');
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { completion_tokens: expect.any(Number) } });
  });

  it('answers the tool’s result in words with finish_reason stop and no tool calls', async () => {
    const roundTrip = [
      ...ask,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temperature_celsius": 21, "sky": "sunny"}' },
    ];
    const answered = await post('/v1/chat/completions', chat({ tools, messages: roundTrip }));
    expect(answered.status).toBe(200);
    const [choice] = answered.body.choices as Array<{ message: { content: string; tool_calls: unknown[] }; finish_reason: string }>;
    expect(choice?.finish_reason).toBe('stop');
    expect(choice?.message.tool_calls).toEqual([]);
    expect(choice?.message.content.length).toBeGreaterThan(0);
  });

  it('answers response_format json_schema with JSON valid against the schema, streamed as content deltas that join to it, and json_object with an object', async () => {
    const schema = { type: 'object', properties: { city: { type: 'string' }, population: { type: 'integer', minimum: 0 } }, required: ['city', 'population'] };
    const format = { type: 'json_schema', json_schema: { name: 'city', schema } };
    const answered = await post('/v1/chat/completions', chat({ response_format: format, messages: [{ role: 'user', content: 'Describe Paris as JSON.' }] }));
    expect(answered.status).toBe(200);
    const content = (answered.body.choices as Array<{ message: { content: string } }>)[0]?.message.content ?? '';
    expect(ajv.validate(schema, JSON.parse(content))).toBe(true);
    const events = await streamed('/v1/chat/completions', chat({ response_format: format, messages: [{ role: 'user', content: 'Describe Paris as JSON.' }] }));
    const text = (events.slice(0, -1) as Chunk[]).map((chunk) => chunk.choices[0]?.delta.content ?? '').join('');
    expect(JSON.parse(text)).toEqual(JSON.parse(content));

    const object = await post('/v1/chat/completions', chat({ response_format: { type: 'json_object' }, messages: [{ role: 'user', content: 'Answer in JSON: what is the capital of France?' }] }));
    const parsed = JSON.parse((object.body.choices as Array<{ message: { content: string } }>)[0]?.message.content ?? '') as unknown;
    expect(typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)).toBe(true);
  });

  it('serves /v1/completions: a text_completion with usage; streamed, text_completion chunks, the finish, the usage chunk, and no [DONE]', async () => {
    const answered = await post('/v1/completions', { model: llm, prompt: 'The capital of France is', max_tokens: 4, temperature: 0 });
    expect(answered.status).toBe(200);
    expect(answered.body).toMatchObject({ object: 'text_completion', model: llm, usage: { completion_tokens: expect.any(Number), prompt_tokens: expect.any(Number) } });
    const [choice] = answered.body.choices as Array<{ text: string; index: number; finish_reason: string }>;
    expect(choice).toMatchObject({ text: expect.any(String), index: 0, finish_reason: expect.stringMatching(/^(length|stop)$/) });

    const events = (await streamed('/v1/completions', { model: llm, prompt: 'The capital of France is', max_tokens: 4, temperature: 0, stream_options: { include_usage: true } })) as Array<{
      object: string;
      choices: Array<{ text: string; finish_reason: string | null }>;
      usage?: Json;
    }>;
    expect(events).not.toContain('[DONE]');
    expect(events.every((event) => event.object === 'text_completion')).toBe(true);
    expect(events.map((event) => event.choices[0]?.text ?? '').join('')).toBe(choice?.text);
    expect(events.at(-2)?.choices[0]?.finish_reason).toBe(choice?.finish_reason);
    expect(events.at(-1)).toMatchObject({ choices: [], usage: answered.body.usage as Json });
  });

  it.skipIf(REAL_ENGINE && !process.env.XINFERENCE_TEST_CHAT_WITHOUT_TOOLS_MODEL)('refuses tools to a family outside its tool-call families with 400 "Only {…} support tool calls"', async () => {
    const refused = await post('/v1/chat/completions', { model: withoutTools, messages: ask, tools });
    expect(refused.status).toBe(400);
    expect(refused.body.detail).toMatch(/^Only \{.*'qwen2\.5-instruct'.*\} support tool calls$/);
  });
});

describe('Replicas: the replica API (scale-ups since 3.2; listing and deleting replicas since 3.0)', () => {
  // A real cluster before 3.2 has no scale-up route: these tests then skip, except the detection's.
  let replicaApi = false;
  beforeAll(async () => {
    replicaApi = await client.hasReplicaApi();
  });
  const scalable = (skip: () => void) => {
    if (!replicaApi) skip();
  };
  const asAdmin = async () => (await signIn()).access_token;
  const replicasOf = async (uid: string) => (await raw(`/v1/models/${uid}/replicas`, { bearer: engine.apiKey })).body as unknown as Json[];
  const instanceOf = async (uid: string) =>
    ((await raw(`/v1/models/instances?model_uid=${uid}`, { bearer: engine.apiKey })).body as unknown as Array<{ status: string; replica: number; replica_statuses: Json[] }>)[0];
  const chat = (uid: string) =>
    raw('/v1/chat/completions', { method: 'POST', bearer: engine.apiKey, body: JSON.stringify({ model: uid, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 4 }) });
  const addRaw = async (uid: string, body?: unknown) =>
    raw(`/v1/models/${uid}/replicas`, { method: 'POST', bearer: await asAdmin(), ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  /** A model of the replica tests, launched and ready: its uid. */
  async function serving(): Promise<string> {
    const spec = engine.replicaSpec();
    await client.launch(spec);
    await ready(spec.modelUid);
    return spec.modelUid;
  }
  const heldBy = (uid: string) => (engine.simulator?.gpus() ?? []).flatMap((gpu) => gpu.holders).filter((holder) => holder.startsWith(`${uid}-rep`));

  it('detects the scale-up route as the engine version says it came (3.2)', async () => {
    const version = await client.version();
    expect(replicaApi).toBe(versionAtLeast(version, 3, 2));
  });

  it('adds a replica that serves once loaded, lists it, deletes one, and terminates the model with its last replica', async ({ skip }) => {
    scalable(skip);
    const uid = await serving();
    try {
      expect(await client.listReplicas(uid)).toEqual([
        { replicaId: 0, replicaModelUid: `${uid}-rep0`, workerAddress: expect.any(String), status: 'READY', errorMessage: null, gpuIdx: expect.any(Array) },
      ]);
      const adding = client.addReplicas(uid, 1);
      // The new replica is listed CREATING from before its load until it is READY; the model serves meanwhile.
      const loading = await poll(
        async () => {
          const replicas = await replicasOf(uid);
          return replicas.length === 2 ? replicas : undefined;
        },
        'the new replica to be listed',
        engine.loadTimeoutMs,
        engine.pollMs,
      );
      if (!REAL_ENGINE) expect(loading[1]).toMatchObject({ replica_id: 1, status: 'CREATING', model_address: null });
      expect((await chat(uid)).status).toBe(200);
      const [added] = await adding;
      expect(added).toEqual({ replicaId: 1, replicaModelUid: `${uid}-rep1`, workerAddress: expect.any(String) });

      const replicas = await replicasOf(uid);
      expect(replicas.map((r) => [r.replica_id, r.replica_model_uid, r.status])).toEqual([
        [0, `${uid}-rep0`, 'READY'],
        [1, `${uid}-rep1`, 'READY'],
      ]);
      // 3.2 labels a scale-up's replica `<uid>-<id>` and records the GPUs it was placed on.
      expect(replicas[1]).toMatchObject({ replica_uid: `${uid}-1`, gpu_idx: expect.any(Array), model_address: expect.any(String), worker_address: added?.workerAddress });
      expect(await instanceOf(uid)).toMatchObject({ status: 'READY', replica: 2 });
      expect((await raw(`/v1/models/${uid}`, { bearer: engine.apiKey })).body.replica).toBe(2);
      for (let i = 0; i < 4; i++) expect((await chat(uid)).status).toBe(200);

      expect(await client.deleteReplica(uid, 0)).toEqual({ state: 'deleted', remainingReplicas: 1 });
      expect((await client.listReplicas(uid)).map((r) => r.replicaId)).toEqual([1]);
      expect(await instanceOf(uid)).toMatchObject({ status: 'READY', replica: 1 });
      expect((await chat(uid)).status).toBe(200);
      expect(await client.deleteReplica(uid, 0)).toEqual({ state: 'missing' });

      // core/supervisor.py, terminate_model_replica: the last replica's DELETE terminates the model.
      expect(await client.deleteReplica(uid, 1)).toEqual({ state: 'deleted', remainingReplicas: 0 });
      expect(await client.state(uid)).toEqual({ state: 'missing' });
      expect(await raw(`/v1/models/${uid}`, { bearer: engine.apiKey })).toMatchObject({ status: 400, body: { detail: `Model not found in the model list, uid: ${uid}` } });
      expect(await replicasOf(uid)).toEqual([]);
      expect((await chat(uid)).status).toBeGreaterThanOrEqual(400);
      expect(await client.deleteReplica(uid, 1)).toEqual({ state: 'missing' });
      expect(heldBy(uid)).toEqual([]);
    } finally {
      await stopped(uid);
    }
  });

  it('gives concurrent scale-ups distinct replica ids, one load after the other, and gives a deleted highest id to the next', async ({ skip }) => {
    scalable(skip);
    const uid = await serving();
    try {
      const started = Date.now();
      // Through the client: each answer may take a load, or two (fetch gives up on headers after 5 minutes).
      const answers = (await Promise.all([client.addReplicas(uid, 1), client.addReplicas(uid, 1)])).flat();
      const elapsed = Date.now() - started;
      expect(answers.map((a) => [a.replicaId, a.replicaModelUid]).sort()).toEqual([
        [1, `${uid}-rep1`],
        [2, `${uid}-rep2`],
      ]);
      // core/supervisor.py holds a lock per model around a scale change, load included.
      if (!REAL_ENGINE) expect(elapsed).toBeGreaterThanOrEqual(2 * (engine.simulator?.state().settings as { model_load_ms: number }).model_load_ms - 50);
      expect((await client.listReplicas(uid)).map((r) => [r.replicaId, r.status])).toEqual([
        [0, 'READY'],
        [1, 'READY'],
        [2, 'READY'],
      ]);
      // The next id is one more than the highest active one, so a deleted highest id comes back.
      expect(await client.deleteReplica(uid, 2)).toEqual({ state: 'deleted', remainingReplicas: 2 });
      expect(await client.addReplicas(uid, 1)).toEqual([expect.objectContaining({ replicaId: 2, replicaModelUid: `${uid}-rep2` })]);
    } finally {
      await stopped(uid);
    }
    expect(heldBy(uid)).toEqual([]);
  });

  it('makes a DELETE of the model during a scale-up wait for it, then terminates every replica', async ({ skip }) => {
    scalable(skip);
    const uid = await serving();
    const adding = client.addReplicas(uid, 1);
    await poll(async () => ((await replicasOf(uid)).length === 2 ? true : undefined), 'the new replica to be listed', engine.loadTimeoutMs, engine.pollMs);
    // The client waits a scale-up out as it waits a launch out.
    expect(await client.stop(uid)).toBe('pending');
    const terminated = await got.delete(`${engine.url}/v1/models/${uid}`, {
      headers: { authorization: `Bearer ${await asAdmin()}` },
      throwHttpErrors: false,
      timeout: { request: engine.loadTimeoutMs },
    });
    expect(terminated.statusCode).toBe(200);
    expect(await adding).toEqual([expect.objectContaining({ replicaId: 1 })]);
    expect(await instanceOf(uid)).toBeUndefined();
    expect((await replicasOf(uid)).map((r) => r.status)).toEqual(['TERMINATED', 'TERMINATED']);
    expect(heldBy(uid)).toEqual([]);
  });

  it('refuses with Xinference\'s statuses and words: an unknown model or replica, a malformed or impossible placement', async ({ skip }) => {
    scalable(skip);
    const unknown = `conformance-unknown-${Date.now()}`;
    expect(await addRaw(unknown)).toMatchObject({ status: 400, body: { detail: `Model not found in the model list, uid: ${unknown}` } });
    await expect(client.addReplicas(unknown, 1)).rejects.toMatchObject({ name: 'ReplicaScaleError', kind: 'missing', added: [] });
    expect(await replicasOf(unknown)).toEqual([]);
    expect(await raw(`/v1/models/${unknown}/replicas/0`, { method: 'DELETE', bearer: await asAdmin() })).toMatchObject({
      status: 400,
      body: { detail: `Model not found in the model list, uid: ${unknown}` },
    });
    expect(await client.deleteReplica(unknown, 0)).toEqual({ state: 'missing' });
    expect((await raw(`/v1/models/${unknown}/replicas/first`, { method: 'DELETE', bearer: await asAdmin() })).status).toBe(422);
    // The route checks the config's structure before it looks the model up.
    expect(await addRaw(unknown, { replica_config: 'one' })).toMatchObject({ status: 400, body: { detail: 'Invalid replica_config: expected a dict with a single device entry.' } });
    expect(await addRaw(unknown, { replica_config: { devices: [] } })).toMatchObject({ status: 400, body: { detail: 'replica_config must contain exactly one device entry for scale-up.' } });
    const noWorker = await addRaw(unknown, { replica_config: { devices: [{ gpu_idx: [0] }] } });
    expect(noWorker.status).toBe(400);
    expect(noWorker.body.detail).toMatch(/^Invalid replica_config: 1 validation error for ReplicaConfig\ndevices -> 0 -> worker_ip\n/);

    const uid = await serving();
    try {
      const workers = await client.workers();
      const address = workers[0]?.address ?? '';
      // core/supervisor.py, _resolve_replica_config: a one-process cluster (`xinference-local`) ignores the worker named.
      const supervisor = (await raw('/v1/address')).body as unknown as string;
      const local = workers.length === 1 && address === supervisor;
      const refusals: Array<[unknown, RegExp]> = [
        [{ replica_config: { devices: [{ worker_ip: '10.255.255.1:1' }] } }, /^replica_config\[0\]\.worker_ip '10\.255\.255\.1:1' is not in the cluster\. Registered workers: \[/],
        [{ replica_config: { devices: [{ worker_ip: address, gpu_idx: [999] }] } }, /^replica_config\[0\]\.gpu_idx \[999\] is not visible on worker .*; visible GPU indexes: \[/],
        [{ replica_config: { devices: [{ worker_ip: address, n_gpu: 2, gpu_idx: [0] }] } }, /^replica_config\[0\]\.devices\[0\]\.n_gpu \(2\) must equal len\(gpu_idx\) \(1\), or be 'auto'\.$/],
        [{ replica_config: { replica_uid: 'burst-rep3', devices: [{ worker_ip: address }] } }, /^replica_uid 'burst-rep3' collides with a reserved internal replica\/rank identifier/],
      ];
      for (const [body, detail] of local ? refusals.slice(1) : refusals) {
        const refused = await addRaw(uid, body);
        expect(refused.status, JSON.stringify(body)).toBe(400);
        expect(refused.body.detail).toMatch(detail);
      }
      await expect(client.addReplicas(uid, [{ workerAddress: address, gpuIdx: [999] }])).rejects.toMatchObject({ kind: 'rejected', added: [] });
      expect(await raw(`/v1/models/${uid}/replicas/7`, { method: 'DELETE', bearer: await asAdmin() })).toMatchObject({
        status: 400,
        body: { detail: `Replica not found in the model list, uid: ${uid}, replica_id: 7` },
      });
      expect(await client.listReplicas(uid)).toHaveLength(1);
    } finally {
      await stopped(uid);
    }
  });

  simulatorOnly('places a replica where its config says, and refuses a placement before the model has loaded (simulator only)', async () => {
    const spec = engine.replicaSpec();
    await client.launch(spec);
    // The supervisor reads the launch's arguments from the first replica's worker, known once it serves.
    await expect(client.addReplicas(spec.modelUid, 1)).rejects.toMatchObject({ kind: 'unavailable', message: `Cannot find worker for existing replica: ${spec.modelUid}-rep0` });
    await ready(spec.modelUid);
    try {
      const [added] = await client.addReplicas(spec.modelUid, [{ workerAddress: 'sim-h100:30001', gpuIdx: [0] }]);
      expect(added).toMatchObject({ replicaId: 1, workerAddress: 'sim-h100:30001' });
      expect((await client.listReplicas(spec.modelUid))[1]).toMatchObject({ workerAddress: 'sim-h100:30001', gpuIdx: [0], status: 'READY' });
      expect(heldBy(spec.modelUid)).toContain(`${spec.modelUid}-rep1`);
    } finally {
      await stopped(spec.modelUid);
    }
  });

  simulatorOnly('fails a scale-up that does not fit at its load: the replicas added before stay, and the instance reads ERROR while the model serves (simulator only)', async () => {
    const uid = await serving();
    try {
      // GPUs are shared: the fourth vLLM replica of this 3-GPU cluster finds its GPU 90% taken.
      const failure = await client.addReplicas(uid, 3).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(ReplicaScaleError);
      expect(failure).toMatchObject({ kind: 'capacity', message: expect.stringMatching(/less than desired GPU memory utilization/) });
      expect((failure as ReplicaScaleError).added.map((r) => r.replicaId)).toEqual([1, 2]);
      expect(heldBy(uid)).not.toContain(`${uid}-rep3`);
      // core/worker.py, terminate_model(is_model_die=True): the failed replica's cleanup marks the instance ERROR.
      const instance = await instanceOf(uid);
      expect(instance).toMatchObject({ status: 'ERROR', replica: 3 });
      expect(instance?.replica_statuses.map((r) => r.status)).toEqual(['READY', 'READY', 'READY']);
      expect((await chat(uid)).status).toBe(200);
      // The next scale change makes it READY again.
      expect(await client.deleteReplica(uid, 2)).toEqual({ state: 'deleted', remainingReplicas: 2 });
      expect(await instanceOf(uid)).toMatchObject({ status: 'READY', replica: 2 });
    } finally {
      await stopped(uid);
    }
  });

  simulatorOnly('with exclusive GPUs, answers 503 "No worker has capacity" when no worker has an idle GPU, and refuses an occupied GPU (simulator only)', async () => {
    const exclusive = await engineUnderTest({ allowMultiReplicaPerGpu: false, workers: [{ name: 'x', gpuName: 'NVIDIA L4', gpuCount: 2, gpuMemoryGb: 24 }] });
    try {
      const own = exclusive.client();
      const spec = exclusive.replicaSpec();
      await own.launch(spec);
      await poll(async () => ((await own.state(spec.modelUid)).state === 'ready' ? true : undefined), 'the model to load', exclusive.loadTimeoutMs, exclusive.pollMs);
      await expect(own.addReplicas(spec.modelUid, [{ workerAddress: 'x:30001', gpuIdx: [0] }])).rejects.toMatchObject({
        kind: 'rejected',
        message: 'replica_config GPU conflict on worker x:30001: GPU indexes [0] are already occupied, and this worker disallows sharing a GPU.',
      });
      expect(await own.addReplicas(spec.modelUid, 1)).toEqual([expect.objectContaining({ replicaId: 1 })]);
      await expect(own.addReplicas(spec.modelUid, 1)).rejects.toMatchObject({ kind: 'capacity', message: 'No worker has capacity for 1 GPU(s)' });
    } finally {
      await exclusive.stop();
    }
  });

  simulatorOnly('keeps a replica being deleted in the rotation: requests routed to it answer 500, and those it was serving fail (simulator only)', async () => {
    const slow = await engineUnderTest({ terminateMs: 400, tokenLatencyMs: 50, completionTokens: 40 });
    try {
      const own = slow.client();
      const spec = slow.replicaSpec();
      await own.launch(spec);
      await poll(async () => ((await own.state(spec.modelUid)).state === 'ready' ? true : undefined), 'the model to load', slow.loadTimeoutMs, slow.pollMs);
      await own.addReplicas(spec.modelUid, 1);
      const post = () =>
        fetch(`${slow.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${slow.apiKey}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: spec.modelUid, messages: [{ role: 'user', content: 'a long answer' }] }),
        });
      // One request on each replica: the rotation starts again from the lowest id after a scale change.
      const onDeleted = post();
      await poll(async () => (slow.simulator?.active() === 1 ? true : undefined), 'the first request to generate', 5_000, 5);
      const onKept = post();
      await poll(async () => (slow.simulator?.active() === 2 ? true : undefined), 'the second request to generate', 5_000, 5);
      const deleting = own.deleteReplica(spec.modelUid, 0);
      await poll(async () => ((await instanceStatus(slow, spec.modelUid)) === 'TERMINATING' ? true : undefined), 'the teardown', 5_000, 5);
      const routedToDying = await Promise.all([post(), post()]);
      expect(routedToDying.map((r) => r.status).sort()).toEqual([200, 500]);
      expect((await onDeleted).status).toBe(500);
      expect((await onKept).status).toBe(200);
      expect(await deleting).toEqual({ state: 'deleted', remainingReplicas: 1 });
    } finally {
      await slow.stop();
    }
  });

  simulatorOnly('has no scale-up route before 3.2: POST answers 405 before authentication, and the client detects no replica API (simulator only)', async () => {
    const older = await engineUnderTest({ version: '3.1.0' });
    try {
      const refused = await fetch(`${older.url}/v1/models/any/replicas`, { method: 'POST' });
      expect(refused.status).toBe(405);
      expect(refused.headers.get('allow')).toBe('GET');
      expect(await refused.json()).toEqual({ detail: 'Method Not Allowed' });
      const own = older.client({ engineVersion: '3.1.0' });
      expect(await own.hasReplicaApi()).toBe(false);
      expect(await own.listReplicas('any')).toEqual([]);
      await expect(own.addReplicas('any', 1)).rejects.toMatchObject({ kind: 'rejected', message: expect.stringMatching(/the engine has no replica API \(405: Method Not Allowed\)/) });
      expect(older.simulator?.launches).toEqual([]);
    } finally {
      await older.stop();
    }
  });
});

async function instanceStatus(target: EngineUnderTest, uid: string): Promise<string | undefined> {
  const response = await fetch(`${target.url}/v1/models/instances?model_uid=${uid}`, { headers: { authorization: `Bearer ${target.apiKey}` } });
  return ((await response.json()) as Array<{ status: string }>)[0]?.status;
}
