import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hostedModelUid } from '../../src/hosted/hosted-launch.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { waitUntil } from '../helpers/net.ts';
import { operatorCli } from '../helpers/operator-cli.ts';

/**
 * A hosted model is checked by the reconciler after `hosted launch`, as a running deployment is. One the engine lost
 * stops routing at once (not the engine's 404 as 502 for every caller), its GPUs are given back,
 * the operator is alerted, and `hosted launch` brings it back.
 */

let app: TestApp;
let caller: SignedInUser;
const HOSTED = 'qwen2.5-instruct';
const lines: string[] = [];

const call = () => caller.api.POST('/v1/chat/completions', { body: { model: HOSTED, messages: [{ role: 'user', content: 'hi' }] } });
const endpoint = () => app.db('hosted_model_endpoints').where({ model_name: HOSTED }).first();

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING }, { workers: true, cluster: { modelLoadMs: 100, tokenLatencyMs: 1 }, logLines: lines });
  caller = await registeredUser(app);
}, 120_000);
afterAll(() => app?.close());

describe('a hosted model the engine lost', () => {
  it('is marked failed by the reconciler, stops routing, gives its GPUs back and alerts, until `hosted launch` brings it back', async () => {
    expect((await operatorCli(app, 'hosted', 'launch', HOSTED)).stdout).toBe(`${HOSTED}\tlocal-hosted\trunning\n`);
    await waitUntil(async () => (await call()).response.status === 200, 'the hosted route');
    const { id } = await endpoint();

    // Past its recover budget the engine drops the model (TERMINATED), as after a worker's death.
    expect(app.simulator?.crash(hostedModelUid(HOSTED), { recover: false })).toBe(true);
    await waitUntil(async () => (await endpoint()).state === 'failed', 'the reconciler to mark it failed');
    expect((await endpoint()).state_reason).toBe('The engine no longer serves the model.');
    expect(await app.db('gpu_allocations').where({ hosted_model_endpoint_id: id, status: 'active' })).toEqual([]);
    expect(lines.some((line) => line.includes('"alert":"hosted_model_failed"'))).toBe(true);
    // Routes are cached 2 s per process; the lost model answers no more 502s after that.
    await waitUntil(async () => (await call()).response.status === 404, 'the routing cache to drop it', 5_000);
    const refused = await call();
    expect(refused.response.status).toBe(404);
    expect(refused.error).toMatchObject({ error: { code: 'model_not_found' } });

    expect((await operatorCli(app, 'hosted', 'launch', HOSTED)).stdout).toBe(`${HOSTED}\tlocal-hosted\trunning\n`);
    await waitUntil(async () => (await call()).response.status === 200, 'the hosted model to serve again');
  });
});
