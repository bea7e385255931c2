import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { startServiceProcess, type ServiceProcess } from '../helpers/service-process.ts';

/**
 * SIGKILL of an API process: the usage of every answer the client received in full is
 * recorded. By default each record is appended to the usage journal before the answer's last bytes
 * go out, and the next process to start on the machine stores what the killed one had not; with
 * `USAGE_JOURNAL_DIR=off`, each is committed to Postgres before them (a group commit with the
 * answers ending at the same time), not in the batch written a second later. The API processes are
 * separate `node src/main.ts` (ROLE=api) on this test's database, cluster and journal directory.
 */
let app: TestApp;
let key: { key: string; id: number };
let model: string;
const processes: ServiceProcess[] = [];

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING }, { workers: true, cluster: { modelLoadMs: 20, tokenLatencyMs: 1 } });
  const owner = await registeredUser(app);
  model = (await deployment(app, owner, 'running')).id;
  key = await apiKey(owner, [model]);
});
afterAll(async () => {
  for (const running of processes) running.kill();
  await app?.close();
});

async function apiProcess(env: Record<string, string> = {}): Promise<ServiceProcess> {
  const started = await startServiceProcess(app, { ROLE: 'api', ...env });
  processes.push(started);
  return started;
}

/** A chat completion on an API process, streamed or not: its request id when the answer arrived in full. */
async function complete(api: ServiceProcess, id: string, stream: boolean): Promise<string | undefined> {
  const response = await fetch(`${api.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json', 'x-request-id': id },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: id }], stream }),
  });
  const text = await response.text();
  const whole = stream ? text.trimEnd().endsWith('data: [DONE]') : response.status === 200 && JSON.parse(text).choices !== undefined;
  return whole ? id : undefined;
}

/** 40 answers in full from `api` (half of them streams), then SIGKILL: the request ids received. */
async function answeredThenKilled(api: ServiceProcess, prefix: string): Promise<string[]> {
  const ids = Array.from({ length: 40 }, (_, i) => `${prefix}-${String(i).padStart(3, '0')}`);
  const received = (await Promise.all(ids.map((id, i) => complete(api, id, i % 2 === 0)))).filter((id): id is string => id !== undefined);
  expect(received).toHaveLength(40);
  // Killed at once: nothing buffered in memory survives.
  api.kill('SIGKILL');
  await api.exited;
  return received;
}

const recorded = async (prefix: string) =>
  (await app.db('usage_records').where({ api_key_id: key.id }).whereLike('request_id', `${prefix}-%`).pluck('request_id')).sort();

describe('an API process killed with SIGKILL', () => {
  it('has journaled the usage of every answer its clients received in full, stored once by the next process to start', async () => {
    const received = await answeredThenKilled(await apiProcess(), 'journal');
    const journal = app.env.USAGE_JOURNAL_DIR as string;
    const segments = (await readdir(journal)).filter((name) => name.endsWith('.jsonl'));
    expect(segments.length).toBeGreaterThan(0);
    // Which mechanism saves it: each answer's usage is in the journal (a line `<HMAC> <record's row
    // JSON>`) or was stored already (a segment whose records were committed is removed), and some
    // were in the journal alone when the process died: only its replay can store them.
    const journaled = (await Promise.all(segments.map((name) => readFile(path.join(journal, name), 'utf8'))))
      .flatMap((text) => text.split('\n'))
      .filter((line) => line.includes(' '))
      .map((line) => (JSON.parse(line.slice(line.indexOf(' ') + 1)) as { request_id: string }).request_id);
    const storedAtTheKill = await recorded('journal');
    expect([...new Set([...journaled, ...storedAtTheKill])].sort()).toEqual(expect.arrayContaining(received));
    expect(received.filter((id) => !storedAtTheKill.includes(id)).length).toBeGreaterThan(0);
    // The next API process stores what the killed one left before it serves.
    await apiProcess();
    expect(await recorded('journal')).toEqual([...received].sort());
    expect(await readdir(journal)).not.toEqual(expect.arrayContaining(segments));
    // Stored once per usage id, whether the killed process had written a record or not.
    const counts = await app.db('usage_records').where({ api_key_id: key.id }).whereLike('request_id', 'journal-%').select('request_id').count('* as n').groupBy('request_id');
    expect(counts.every((row) => Number(row.n) === 1)).toBe(true);
  });

  it('without a journal, has committed the usage of every answer its clients received in full before their last bytes', async () => {
    const received = await answeredThenKilled(await apiProcess({ USAGE_JOURNAL_DIR: 'off' }), 'commit');
    expect(await recorded('commit')).toEqual([...received].sort());
  });
});
