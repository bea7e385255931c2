import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { appendFile, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { SessionPrincipal } from '../../src/principal.ts';
import { Keyring } from '../../src/crypto.ts';
import type { NewUsageRecord } from '../../src/inference/inference.repository.ts';
import { UsageRecorder, type UsageRecord } from '../../src/inference/usage.ts';
import { USAGE_JOURNAL_KEY_PURPOSE, UsageJournal } from '../../src/inference/usage-journal.ts';
import { waitUntil } from '../helpers/net.ts';
import { startServices, type Services } from '../helpers/services.ts';

/**
 * The usage recorder: inference requests record usage in memory, and batches reach the database
 * off the request path. What a request cannot show over HTTP: the batching, the once-per-usage-id
 * write, and what a failed write does to the records after it.
 */
let services: Services;
let owner: SessionPrincipal;
const lines: string[] = [];
beforeAll(async () => {
  services = await startServices({}, { log: pino({ level: 'error' }, { write: (line: string) => void lines.push(line) }) });
  owner = await services.owner();
});
afterAll(() => services.close());

function usage(overrides: Partial<UsageRecord> = {}): UsageRecord {
  return {
    usageId: randomUUID(),
    requestId: 'req_test',
    organizationId: owner.organization?.id ?? 0,
    deploymentId: null,
    apiKeyId: null,
    userId: owner.user.id,
    route: '/v1/chat/completions',
    model: 'qwen2.5-instruct',
    promptTokens: 3,
    completionTokens: 4,
    totalTokens: 7,
    unit: 'token',
    quantity: 7,
    outcome: 'completed',
    estimated: false,
    recordedAt: new Date(),
    ...overrides,
  };
}

const rowsLabelled = (requestId: string) => services.db('usage_records').where({ request_id: requestId });
/** A recorder of its own, never started on a timer: each test decides when batches are written. */
const recorder = () => new UsageRecorder(services.db, services.log);

describe('the usage recorder', () => {
  it('writes nothing until a flush, then the whole batch at once', async () => {
    const usages = recorder();
    for (let i = 0; i < 3; i++) usages.record(usage({ requestId: 'batch-of-3' }));
    expect(await rowsLabelled('batch-of-3')).toEqual([]);
    await usages.flush();
    expect(await rowsLabelled('batch-of-3')).toHaveLength(3);
  });

  it('writes a full buffer of 500 without waiting for the timer', async () => {
    const usages = recorder();
    for (let i = 0; i < 500; i++) usages.record(usage({ requestId: 'batch-of-500' }));
    await waitUntil(async () => (await rowsLabelled('batch-of-500')).length === 500, 'the full buffer to be written');
  });

  it('stores a usage id once, however often it is recorded (a retried write)', async () => {
    const usages = recorder();
    const once = usage({ requestId: 'recorded-twice' });
    usages.record(once);
    await usages.flush();
    usages.record({ ...once, quantity: 99 });
    await usages.flush();
    expect(await rowsLabelled('recorded-twice')).toEqual([expect.objectContaining({ usage_id: once.usageId, quantity: '7' })]);
  });

  it('logs a batch the database refuses, and goes on writing the next ones', async () => {
    const usages = recorder();
    usages.record(usage({ requestId: 'refused', organizationId: 2_000_000_000 }));
    await expect(usages.flush()).resolves.toBeUndefined();
    expect(lines.map((line) => JSON.parse(line) as Record<string, unknown>)).toContainEqual(
      expect.objectContaining({ level: 50, msg: 'usage records could not be written', records: 1 }),
    );
    usages.record(usage({ requestId: 'after-the-refusal' }));
    await usages.flush();
    expect(await rowsLabelled('after-the-refusal')).toHaveLength(1);
  });

  it('writes what is buffered when it stops (a graceful shutdown)', async () => {
    const usages = recorder();
    usages.start(60_000);
    usages.record(usage({ requestId: 'at-stop' }));
    await usages.stop();
    expect(await rowsLabelled('at-stop')).toHaveLength(1);
  });
});

/** Rows as the journal holds them. */
function journalRow(requestId: string): NewUsageRecord {
  const record = usage({ requestId });
  return {
    usage_id: record.usageId,
    request_id: requestId,
    organization_id: record.organizationId,
    deployment_id: null,
    api_key_id: null,
    user_id: record.userId,
    route: record.route,
    model: record.model,
    prompt_tokens: 3,
    completion_tokens: 4,
    total_tokens: 7,
    unit: 'token',
    quantity: 7,
    outcome: 'completed',
    estimated: false,
    created_at: record.recordedAt,
  };
}

/**
 * Another process with a journal in `dir` (the real class, in a `node` process of its own) that
 * appends `rows`, then exits without closing it, as a killed one would, or stays alive until killed.
 */
async function processJournaling(dir: string, rows: NewUsageRecord[], stay = false): Promise<ChildProcess> {
  const script = `
    import { UsageJournal } from ${JSON.stringify(path.resolve('src/inference/usage-journal.ts'))};
    const journal = new UsageJournal(process.env.JOURNAL_DIR, { error() {}, warn() {} }, Buffer.from(process.env.JOURNAL_KEY, 'base64'));
    // Told once the lines are in the file (the journal writes a turn's appends together, after the turn).
    await Promise.all(JSON.parse(process.env.ROWS).map((row) => journal.append(JSON.stringify(row))));
    process.stdout.write('appended\\n');
    if (process.env.STAY) setInterval(() => undefined, 60_000);`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    env: { ...process.env, JOURNAL_DIR: dir, JOURNAL_KEY: journalKey.toString('base64'), ROWS: JSON.stringify(rows), ...(stay ? { STAY: '1' } : {}) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on('data', (data: Buffer) => String(data).includes('appended') && resolve());
    child.once('exit', (code) => (code === 0 && !stay ? undefined : reject(new Error(`the journaling process exited with ${code}`))));
  });
  if (!stay) await once(child, 'exit');
  return child;
}

const journalKey = new Keyring('usage journal tests').key(USAGE_JOURNAL_KEY_PURPOSE);
const segmentsIn = async (dir: string) => (await readdir(dir)).filter((name) => name.endsWith('.jsonl'));

describe('the usage journal', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'usage-journal-'));
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));
  const journaled = () => new UsageRecorder(services.db, services.log, { journal: new UsageJournal(dir, services.log, journalKey) });

  it('holds a complete answer\'s usage without a database round trip, and drops its segment once the batch is stored', async () => {
    const usages = journaled();
    // Resolved once in the journal, with the other records of this turn of the event loop (one write).
    await Promise.all([usages.commit(usage({ requestId: 'journaled' })), usages.commit(usage({ requestId: 'journaled' }))]);
    const [segment] = await segmentsIn(dir);
    const lines = (await readFile(path.join(dir, segment as string), 'utf8')).trimEnd().split('\n');
    // Each line is `<HMAC> <JSON>`.
    expect(lines.map((line) => JSON.parse(line.slice(line.indexOf(' ') + 1)) as unknown)).toEqual([expect.objectContaining({ request_id: 'journaled' }), expect.objectContaining({ request_id: 'journaled' })]);
    expect(await rowsLabelled('journaled')).toEqual([]);
    await usages.flush();
    expect(await rowsLabelled('journaled')).toHaveLength(2);
    expect(await segmentsIn(dir)).toEqual([]);
  });

  it('stores once what a process that is gone left, skipping a line its kill cut short and a record the database refuses, and deletes its segment', async () => {
    const rows = [journalRow('orphaned'), journalRow('orphaned')];
    await processJournaling(dir, [...rows, { ...journalRow('orphan-refused'), organization_id: 2_000_000_000 }]);
    const [segment] = await segmentsIn(dir);
    await appendFile(path.join(dir, segment as string), '{"usage_id": "cut sh');
    // One of them reached the database before the kill.
    await recorder().commit(usage({ usageId: rows[0]?.usage_id as string, recordedAt: rows[0]?.created_at as Date, requestId: 'orphaned' }));
    expect(await rowsLabelled('orphaned')).toHaveLength(1);
    await journaled().recoverOrphans();
    expect((await rowsLabelled('orphaned')).map((row: { usage_id: string }) => row.usage_id).sort()).toEqual(rows.map((row) => row.usage_id).sort());
    expect(await rowsLabelled('orphan-refused')).toEqual([]);
    expect(lines.map((line) => JSON.parse(line) as Record<string, unknown>)).toContainEqual(expect.objectContaining({ level: 50, msg: 'a usage record was refused' }));
    expect(await segmentsIn(dir)).toEqual([]);
  });

  it('leaves alone the segments of a live process and of another machine', async () => {
    const live = await processJournaling(dir, [journalRow('live-neighbour')], true);
    try {
      await writeFile(path.join(dir, 'another-machine.1.0123456789abcdef.1.jsonl'), `${JSON.stringify(journalRow('another-machine'))}\n`);
      await journaled().recoverOrphans();
      expect(await rowsLabelled('live-neighbour')).toEqual([]);
      expect(await rowsLabelled('another-machine')).toEqual([]);
      expect(await segmentsIn(dir)).toHaveLength(2);
    } finally {
      live.kill('SIGKILL');
    }
    // Once the neighbour is gone, its segment is stored; the other machine's still is not.
    await once(live, 'exit');
    await journaled().recoverOrphans();
    expect(await rowsLabelled('live-neighbour')).toHaveLength(1);
    expect(await segmentsIn(dir)).toEqual(['another-machine.1.0123456789abcdef.1.jsonl']);
  });

  it('commits before the answer ends when the journal cannot be written', async () => {
    const notADirectory = path.join(dir, 'a-file');
    await writeFile(notADirectory, '');
    const usages = new UsageRecorder(services.db, services.log, { journal: new UsageJournal(notADirectory, services.log, journalKey) });
    const committed = usages.commit(usage({ requestId: 'journal-unwritable' }));
    expect(committed).toBeInstanceOf(Promise);
    await committed;
    expect(await rowsLabelled('journal-unwritable')).toHaveLength(1);
    expect(lines.map((line) => JSON.parse(line) as Record<string, unknown>)).toContainEqual(
      expect.objectContaining({ level: 50, msg: 'the usage journal could not be written; usage is stored before answers end instead' }),
    );
  });
});
