import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionPrincipal } from '../../src/accounts/principal.ts';
import { UsageRecorder, type UsageRecord } from '../../src/inference/usage.ts';
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
