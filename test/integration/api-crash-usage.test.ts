import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { startServiceProcess, type ServiceProcess } from '../helpers/service-process.ts';

/**
 * SIGKILL of an API process (issue #12): the usage of every answer the client received in full is
 * recorded, because it is committed before the answer's last bytes go out (a group commit with the
 * answers ending at the same time), not in the batch written a second later. The API process is a
 * separate `node src/main.ts` (ROLE=api) on this test's database and cluster.
 */
let app: TestApp;
let api: ServiceProcess;
let apiUrl: string;
let key: { key: string; id: number };
let model: string;

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING }, { workers: true, cluster: { modelLoadMs: 20, tokenLatencyMs: 1 } });
  const owner = await registeredUser(app);
  model = (await deployment(app, owner, 'running')).id;
  key = await apiKey(owner, [model]);
  api = await startServiceProcess(app, { ROLE: 'api' });
  apiUrl = api.url as string;
});
afterAll(async () => {
  api?.kill();
  await app?.close();
});

/** A chat completion on the API process, streamed or not: its request id when the answer arrived in full. */
async function complete(id: string, stream: boolean): Promise<string | undefined> {
  const response = await fetch(`${apiUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json', 'x-request-id': id },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: id }], stream }),
  });
  const text = await response.text();
  const whole = stream ? text.trimEnd().endsWith('data: [DONE]') : response.status === 200 && JSON.parse(text).choices !== undefined;
  return whole ? id : undefined;
}

describe('an API process killed with SIGKILL', () => {
  it('has recorded the usage of every answer its clients received in full', async () => {
    const ids = Array.from({ length: 40 }, (_, i) => `crash-${String(i).padStart(3, '0')}`);
    const received = (await Promise.all(ids.map((id, i) => complete(id, i % 2 === 0)))).filter((id): id is string => id !== undefined);
    expect(received).toHaveLength(40);
    // Killed at once: nothing buffered survives, only what was written.
    api.kill('SIGKILL');
    await api.exited;
    const recorded = await app.db('usage_records').where({ api_key_id: key.id }).pluck('request_id');
    expect([...recorded].sort()).toEqual([...received].sort());
  });
});
