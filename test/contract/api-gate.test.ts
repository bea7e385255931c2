import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkApiChanges } from '../../src/cli/api-gate.ts';
import { generateChangedSpec } from '../helpers/spec-copy.ts';

/**
 * The breaking-change gate (src/cli/api-gate.ts): the generated document against the released one
 * (spec/released/), as CI runs it, and what it says when a change to spec/ breaks a client.
 */
const root = path.resolve(import.meta.dirname, '../..');
const RELEASED = path.join(root, 'spec/released/openapi-v1.json');
const GENERATED = path.join(root, 'generated/openapi.json');
const CHANGELOG = path.join(root, 'spec/CHANGELOG.md');

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'api-gate-'));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('the breaking-change gate', () => {
  it('passes the generated document against the released one', async () => {
    expect(await checkApiChanges(RELEASED, GENERATED, CHANGELOG)).toMatchObject({ passed: true });
  }, 60_000);

  it('fails when a response field is deleted from spec/, naming the field and the operations it breaks', async () => {
    const withoutField = (_file: string, text: string) => text.replace(/^\s*selection_reason: .*\n/gm, '');
    const broken = await generateChangedSpec(path.join(dir, 'project'), ['deployments/models.tsp', 'deployments/operations.tsp', 'deployments/examples.tsp'], withoutField);
    const document = JSON.parse(await readFile(broken, 'utf8')) as { components: { schemas: { Deployment: { properties: object } } } };
    expect(document.components.schemas.Deployment.properties).not.toHaveProperty('selection_reason');

    const result = await checkApiChanges(RELEASED, broken, CHANGELOG);
    expect(result.passed).toBe(false);
    expect(result.message).toContain("GET /api/v1/model-deployments/{deployment_id}: cannot remove response property 'selection_reason'");
    expect(result.message).toMatch(/raise info\.version .* new major version/);
  }, 120_000);

  it('lets the break through once recorded: a new major version with its section in the changelog', async () => {
    const document = JSON.parse(await readFile(GENERATED, 'utf8')) as { info: { version: string }; components: { schemas: Record<string, { properties: Record<string, unknown>; required?: string[] }> } };
    const deployment = document.components.schemas.Deployment as { properties: Record<string, unknown>; required?: string[] };
    delete deployment.properties.selection_reason;
    deployment.required = deployment.required?.filter((name) => name !== 'selection_reason');
    const unrecorded = path.join(dir, 'unrecorded.json');
    await writeFile(unrecorded, JSON.stringify({ ...document, info: { ...document.info, version: '2.0.0' } }));
    const changelog = path.join(dir, 'CHANGELOG.md');
    await writeFile(changelog, `${await readFile(CHANGELOG, 'utf8')}\n## 2.0.0\n\n\`Deployment.selection_reason\` is removed.\n`);

    expect(await checkApiChanges(RELEASED, unrecorded, CHANGELOG)).toMatchObject({ passed: false });
    const recorded = await checkApiChanges(RELEASED, unrecorded, changelog);
    expect(recorded.passed).toBe(true);
    expect(recorded.message).toContain('recorded as version 2.0.0');
  }, 120_000);
});
