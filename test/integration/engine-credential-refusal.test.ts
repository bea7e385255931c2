import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelPermission } from '../../dev/simulator/auth.ts';
import { LOCAL_CLUSTER_NAME } from '../../dev/local-cluster.ts';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser } from '../factories/accounts.ts';
import { deployment, type Deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { keyClient } from '../helpers/browser.ts';
import { waitUntil } from '../helpers/net.ts';
import { operatorCliIn } from '../helpers/operator-cli.ts';
import { startServiceProcess, type ServiceProcess } from '../helpers/service-process.ts';

/**
 * Every refused bearer counts toward Xinference's ban of the platform's address, so once one process saw
 * the engine refuse a cluster's API key, the other processes stop sending it when the mark's
 * notification reaches them, not when their 2 s routing cache expires. A key limited to some
 * models is refused for one model only: that fails the request, not the cluster, and registration
 * reports which model types the key may call.
 */

let app: TestApp;
let other: ServiceProcess;
let chat: Deployment;
let embedder: Deployment;
let key: string;

const hello = [{ role: 'user' as const, content: 'hello' }];
const chatVia = (url: string) => keyClient(url, key).POST('/v1/chat/completions', { body: { model: chat.id, messages: hello } });

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING }, { workers: true, cluster: { modelLoadMs: 100, tokenLatencyMs: 1 } });
  other = await startServiceProcess(app, { ROLE: 'api' });
  const owner = await registeredUser(app);
  chat = await deployment(app, owner, 'running', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 });
  embedder = await deployment(app, owner, 'running', { model_name: 'bge-m3' });
  key = (await apiKey(owner, [chat.id, embedder.id], { name: 'two processes' })).key;
}, 120_000);

afterAll(async () => {
  other?.kill();
  await other?.exited;
  await app?.close();
});

describe('an inference API key the engine refused', () => {
  it('is not sent again by another process once the mark is announced, though its routing cache still shows the cluster active', async () => {
    const auth = app.simulator?.auth;
    const engineKey = app.simulator?.credentials?.apiKey;
    if (!auth || !engineKey || !other.url) throw new Error('the simulator runs with authentication, and the other process serves the API');
    // Both processes have just read the cluster as active: their routing caches hold it for 2 s.
    expect((await chatVia(other.url)).response.status).toBe(200);
    expect((await chatVia(app.url)).response.status).toBe(200);

    auth.deleteApiKey(engineKey);
    const invalidBefore = auth.invalidBearers;
    expect((await chatVia(app.url)).response.status).toBe(502);
    // The other process hears of it through Postgres (one notification), well within its cache's 2 s:
    // waited for at most 500 ms, then it is called while its cache still shows the cluster active.
    const heard = await waitUntil(async () => /seen by another process/.test(other.output()), 'the other process to hear of the refusal', 500).then(
      () => true,
      () => false,
    );
    const refused = await chatVia(other.url);
    expect(refused.error).toMatchObject({ error: { code: 'engine_unavailable' } });
    expect(refused.response.status).toBe(503);
    expect(auth.invalidBearers - invalidBefore).toBe(1);
    expect(heard).toBe(true);
    expect((await app.db('clusters').where({ name: LOCAL_CLUSTER_NAME }).first()).status).toBe('credentials_invalid');

    // An operator's check makes it active again, in every process.
    auth.addApiKey(engineKey, 'admin');
    await app.container.clusters.check(LOCAL_CLUSTER_NAME);
    await waitUntil(async () => (await chatVia(other.url as string)).response.status === 200, 'the other process to serve again');
  });
});

describe('an inference API key limited to some models', () => {
  const llmOnly: ModelPermission[] = [{ permission_type: 'model_type', permission_value: 'LLM' }];

  it('fails the request for a model the key may not call, with 502, and leaves the cluster serving the others', async () => {
    const auth = app.simulator?.auth;
    const engineKey = app.simulator?.credentials?.apiKey;
    if (!auth || !engineKey) throw new Error('the simulator runs with authentication');
    auth.addApiKey(engineKey, 'admin', llmOnly);
    try {
      for (let attempt = 0; attempt < 2; attempt++) {
        const refused = await keyClient(app.url, key).POST('/v1/embeddings', { body: { model: embedder.id, input: 'x' } });
        expect(refused.response.status).toBe(502);
        expect(refused.error).toMatchObject({ error: { code: 'upstream_error', type: 'server_error' } });
        expect(JSON.stringify(refused.error)).not.toContain('dep-');
      }
      expect((await chatVia(app.url)).response.status).toBe(200);
      expect((await app.db('clusters').where({ name: LOCAL_CLUSTER_NAME }).first()).status).toBe('active');
    } finally {
      auth.addApiKey(engineKey, 'admin');
    }
  });

  it('is reported by `cluster register` and `cluster check`; a key that may call no model type is refused', async () => {
    const simulator = app.simulator;
    const credentials = simulator?.credentials;
    if (!simulator || !credentials) throw new Error('the simulator runs with authentication');
    simulator.auth?.addApiKey('xf-llm-only-key', 'admin', llmOnly);
    simulator.auth?.addApiKey('xf-one-model-key', 'admin', [{ permission_type: 'model_id', permission_value: 'some-other-model' }]);
    const cli = (...argv: string[]) =>
      operatorCliIn(
        { NODE_ENV: 'test', APP_SECRET: app.env.APP_SECRET ?? '', DATABASE_URL: app.databaseUrl, ADMIN_PASSWORD: credentials.adminPassword, LLM_ONLY: 'xf-llm-only-key', ONE_MODEL: 'xf-one-model-key' },
        ...argv,
      );
    const register = (name: string, keyEnv: string) =>
      cli('cluster', 'register', '--name', name, '--endpoint', simulator.url, '--admin-user', credentials.adminUser, '--admin-password-env', 'ADMIN_PASSWORD', '--api-key-env', keyEnv);

    const limited = await register('gpu-llm-only', 'LLM_ONLY');
    expect(limited).toMatchObject({ code: 0, stderr: '' });
    expect(limited.stdout).toContain('warning: the inference API key may call only LLM models; the engine refuses it for embedding, rerank, image, audio models');
    const checked = await cli('cluster', 'check', '--name', LOCAL_CLUSTER_NAME);
    expect(checked.code).toBe(0);
    expect(checked.stdout).toContain('the inference API key may call every model type (LLM, embedding, rerank, image, audio)');

    const none = await register('gpu-one-model', 'ONE_MODEL');
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/the API key may call no model the platform launches/);
    expect(await app.db('clusters').where({ name: 'gpu-one-model' }).first()).toBeUndefined();
  });
});

describe('what else a Xinference key or account can be refused for', () => {
  it('stops calling a cluster whose key expired, and one whose admin must change its password, as a refused credential', async () => {
    const simulator = app.simulator;
    const auth = simulator?.auth;
    const credentials = simulator?.credentials;
    if (!auth || !credentials) throw new Error('the simulator runs with authentication');
    const cluster = () => app.db('clusters').where({ name: LOCAL_CLUSTER_NAME }).first();

    auth.expireApiKey(credentials.apiKey);
    expect((await chatVia(app.url)).response.status).toBe(502);
    await waitUntil(async () => (await cluster()).status === 'credentials_invalid', 'the cluster to be marked');
    expect((await cluster()).status_reason).toMatch(/answered 401/);
    expect((await chatVia(app.url)).response.status).toBe(503);
    auth.addApiKey(credentials.apiKey, 'admin');

    // Xinference signs the flagged account in, and refuses every call but the password change.
    auth.setMustChangePassword(credentials.adminUser, true);
    await expect(app.container.clusters.check(LOCAL_CLUSTER_NAME)).rejects.toThrow(/requires admin to change its password/);
    auth.setMustChangePassword(credentials.adminUser, false);
    await app.container.clusters.check(LOCAL_CLUSTER_NAME);
    await waitUntil(async () => (await chatVia(app.url)).response.status === 200, 'the cluster to serve again');
  });

  // Last: the key stays banned from this address for the simulator's life.
  it('treats the engine’s ban of the key from the platform’s address as a refused credential, with its own alert, not as a rate limit', async () => {
    const simulator = app.simulator;
    const auth = simulator?.auth;
    const engineKey = simulator?.credentials?.apiKey;
    if (!simulator || !auth || !engineKey) throw new Error('the simulator runs with authentication');
    expect((await chatVia(app.url)).response.status).toBe(200);
    // Five uses of the key while it was disabled, from this address (another client of the same key, say), ban it here for an hour.
    auth.setApiKeyEnabled(engineKey, false);
    for (let i = 0; i < 5; i++) {
      const refused = await fetch(`${simulator.url}/v1/models`, { headers: { authorization: `Bearer ${engineKey}` } });
      expect(refused.status).toBe(401);
    }
    auth.setApiKeyEnabled(engineKey, true);
    const banned = await fetch(`${simulator.url}/v1/models`, { headers: { authorization: `Bearer ${engineKey}` } });
    expect([banned.status, await banned.json()]).toEqual([429, { detail: 'Too many failed attempts for this key.' }]);

    const refused = await chatVia(app.url);
    expect(refused.response.status).toBe(502);
    expect(refused.error).toMatchObject({ error: { code: 'upstream_error' } });
    const calls = auth.refusals[429];
    const next = await chatVia(app.url);
    expect(next.response.status).toBe(503);
    expect(next.error).toMatchObject({ error: { code: 'engine_unavailable' } });
    expect(auth.refusals[429]).toBe(calls);
    await waitUntil(async () => (await app.db('clusters').where({ name: LOCAL_CLUSTER_NAME }).first()).status === 'credentials_invalid', 'the cluster to be marked');
  });
});
