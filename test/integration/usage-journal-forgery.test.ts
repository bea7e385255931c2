import { spawn } from 'node:child_process';
import { createHmac, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { chmod, chown, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Keyring } from '../../src/crypto.ts';
import { USAGE_JOURNAL_KEY_PURPOSE } from '../../src/inference/usage-journal.ts';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, TEST_APP_SECRET, type TestApp } from '../helpers/app.ts';
import { startServiceProcess, type ServiceProcess } from '../helpers/service-process.ts';

/**
 * Planted usage-journal segments: whoever can write in the journal directory
 * could bill any organization by leaving a well-formed segment named after a dead process there.
 * Each line now carries an HMAC under a key derived from APP_SECRET, and a directory that is another
 * user's or that others can write is not used. The API processes are separate `node src/main.ts`
 * (ROLE=api), which store the segments of dead processes as they start.
 */
let app: TestApp;
let key: { key: string; id: number };
let model: string;
let victim: number;
let deadPid: number;
const processes: ServiceProcess[] = [];
const dirs: string[] = [];

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING }, { workers: true, cluster: { modelLoadMs: 20, tokenLatencyMs: 1 } });
  const owner = await registeredUser(app);
  model = (await deployment(app, owner, 'running')).id;
  key = await apiKey(owner, [model]);
  victim = (await app.db('memberships').where({ user_id: owner.user.id }).first()).organization_id as number;
  // A process id that is gone: a segment named after it is an orphan to be stored.
  const child = spawn(process.execPath, ['-e', '']);
  await once(child, 'exit');
  deadPid = child.pid as number;
});
afterEach(() => {
  for (const running of processes.splice(0)) running.kill();
});
afterAll(async () => {
  await app?.close();
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

async function journalDir(): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'usage-journal-forgery-'));
  dirs.push(dir);
  return dir;
}

async function apiProcess(dir: string): Promise<ServiceProcess> {
  const started = await startServiceProcess(app, { ROLE: 'api', USAGE_JOURNAL_DIR: dir });
  processes.push(started);
  return started;
}

/** A usage record for the victim organization, as the journal holds it: 10 M tokens of a hosted model. */
function record(requestId: string): string {
  return JSON.stringify({
    usage_id: randomUUID(),
    request_id: requestId,
    organization_id: victim,
    deployment_id: null,
    api_key_id: null,
    user_id: null,
    route: '/v1/chat/completions',
    model: 'llama-3.1-instruct',
    prompt_tokens: 5_000_000,
    completion_tokens: 5_000_000,
    total_tokens: 10_000_000,
    unit: 'token',
    quantity: 10_000_000,
    outcome: 'completed',
    estimated: false,
    created_at: new Date().toISOString(),
  });
}

const hmac = (secret: string, json: string) => createHmac('sha256', new Keyring(secret).key(USAGE_JOURNAL_KEY_PURPOSE)).update(json).digest('base64url');
const signed = (json: string) => `${hmac(TEST_APP_SECRET, json)} ${json}`;

/** A segment named as a process of this machine that is gone would name it. */
async function plant(dir: string, lines: string[]): Promise<string> {
  const name = `${hostname().replaceAll(/[^A-Za-z0-9_-]/g, '_')}.${deadPid}.0123456789abcdef.1.jsonl`;
  await writeFile(path.join(dir, name), lines.map((line) => `${line}\n`).join(''));
  return name;
}

const stored = (requestId: string) => app.db('usage_records').where({ request_id: requestId }).pluck('total_tokens');
const alerts = (api: ServiceProcess) =>
  api
    .output()
    .split('\n')
    .filter((line) => line.includes('"alert"'))
    .map((line) => JSON.parse(line) as { alert: string; reason?: string });

describe('a planted usage-journal segment', { timeout: 90_000 }, () => {
  it('is not stored when its lines carry no HMAC or a wrong one, raises an alert and is kept aside; a signed line is stored', async () => {
    const dir = await journalDir();
    const segment = await plant(dir, [record('forged-bare'), `${hmac('another secret another secret 0123', record('forged-other-key'))} ${record('forged-other-key')}`, signed(record('journal-signed'))]);
    const api = await apiProcess(dir);
    expect(await stored('forged-bare')).toEqual([]);
    expect(await stored('forged-other-key')).toEqual([]);
    expect(await stored('journal-signed')).toEqual([10_000_000]);
    expect(alerts(api)).toContainEqual(expect.objectContaining({ alert: 'usage_journal_forged', lines: 2, stored: 1 }));
    expect(await readdir(dir)).toEqual([`${segment}.refused`]);
  });
});

// Each test starts an API process (a few seconds on a loaded machine).
describe('a journal directory another user could write in', { timeout: 90_000 }, () => {
  /** Neither the planted (signed) segment is read nor is the journal written; answers commit their usage before they end. */
  async function expectRefused(dir: string, prefix: string, reason: RegExp): Promise<void> {
    const segment = await plant(dir, [signed(record(`${prefix}-planted`))]);
    const api = await apiProcess(dir);
    expect(await stored(`${prefix}-planted`)).toEqual([]);
    const response = await fetch(`${api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json', 'x-request-id': `${prefix}-answer` },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }] }),
    });
    const body = await response.text();
    expect(response.status, body).toBe(200);
    // Committed before the answer ended (there is no journal to hold it).
    expect(await app.db('usage_records').where({ request_id: `${prefix}-answer`, api_key_id: key.id })).toHaveLength(1);
    expect(await readdir(dir)).toEqual([segment]);
    const refusals = alerts(api).filter((line) => line.alert === 'usage_journal_directory_refused');
    expect(refusals.length).toBeGreaterThan(0);
    for (const refusal of refusals) expect(refusal.reason).toMatch(reason);
  }

  it('is refused when others may write in it (mode 0777)', async () => {
    const dir = await journalDir();
    await chmod(dir, 0o777);
    await expectRefused(dir, 'journal-0777', /may write in it \(mode 0777\)/);
  });

  it.skipIf(process.getuid?.() !== 0)('is refused when another user owns it', async () => {
    const dir = await journalDir();
    await chown(dir, 65534, 65534);
    await expectRefused(dir, 'journal-owner', /owned by user 65534/);
  });
});
