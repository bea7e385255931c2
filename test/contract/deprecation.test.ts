import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateChangedSpec } from '../helpers/spec-copy.ts';

/** The `@deprecation(since, sunset)` decorator (spec/common/route-rules.tsp), as a spec author uses it. */
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'deprecation-'));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

const deprecate = (decorator: string) => (_file: string, text: string) => text.replace('  @operationId("getHealth")', `  ${decorator}\n  @operationId("getHealth")`);

interface Operation {
  deprecated?: boolean;
  'x-deprecation'?: unknown;
  responses: Record<string, { headers?: Record<string, unknown> }>;
}

describe('@deprecation', () => {
  it('marks the operation deprecated, with x-deprecation and the Deprecation and Sunset headers on each answer', async () => {
    const file = await generateChangedSpec(path.join(dir, 'valid'), ['platform/operations.tsp'], deprecate('@deprecation("2026-11-01", "2027-07-01")'));
    const document = JSON.parse(await readFile(file, 'utf8')) as { paths: Record<string, { get: Operation }>; components: { headers: Record<string, unknown> } };
    const health = document.paths['/healthz']?.get as Operation;
    expect(health).toMatchObject({ deprecated: true, 'x-deprecation': { since: '2026-11-01', sunset: '2027-07-01' } });
    for (const response of Object.values(health.responses)) expect(Object.keys(response.headers ?? {})).toEqual(expect.arrayContaining(['Deprecation', 'Sunset']));
    expect(document.components.headers).toHaveProperty('Sunset');
    expect(document.paths['/openapi.json']?.get.deprecated).toBeUndefined();
  }, 60_000);

  it('refuses a date that is not YYYY-MM-DD, and a sunset before its start', async () => {
    const compile = (name: string, decorator: string) => generateChangedSpec(path.join(dir, name), ['platform/operations.tsp'], deprecate(decorator));
    await expect(compile('not-a-date', '@deprecation("soon", "2027-07-01")')).rejects.toMatchObject({ stdout: expect.stringContaining('must be a date, YYYY-MM-DD: soon') });
    await expect(compile('backwards', '@deprecation("2027-07-01", "2026-11-01")')).rejects.toMatchObject({ stdout: expect.stringContaining('the sunset must come after since') });
  }, 60_000);
});
