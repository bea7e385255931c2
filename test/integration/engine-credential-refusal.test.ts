import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCAL_CLUSTER_NAME } from '../../src/local/local-cluster.ts';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser } from '../factories/accounts.ts';
import { deployment, type Deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { keyClient } from '../helpers/browser.ts';
import { waitUntil } from '../helpers/net.ts';
import { startServiceProcess, type ServiceProcess } from '../helpers/service-process.ts';

/**
 * Issue #32 item 21 (../shared/reviews/xinference-fidelity-24d823e.md, N1): every refused bearer
 * counts toward Xinference's ban of the platform's address, so once one process saw the engine
 * refuse a cluster's API key, the other processes stop sending it when the mark's notification
 * reaches them, not when their 2 s routing cache expires.
 */

let app: TestApp;
let other: ServiceProcess;
let chat: Deployment;
let key: string;

const hello = [{ role: 'user' as const, content: 'hello' }];
const chatVia = (url: string) => keyClient(url, key).POST('/v1/chat/completions', { body: { model: chat.id, messages: hello } });

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING }, { workers: true, cluster: { modelLoadMs: 100, tokenLatencyMs: 1 } });
  other = await startServiceProcess(app, { ROLE: 'api' });
  const owner = await registeredUser(app);
  chat = await deployment(app, owner, 'running', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 });
  key = (await apiKey(owner, [chat.id], { name: 'two processes' })).key;
}, 120_000);

afterAll(async () => {
  other?.kill();
  await other?.exited;
  await app?.close();
});

describe('an inference API key the engine refused (N1)', () => {
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
