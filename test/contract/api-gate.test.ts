import { execFile } from 'node:child_process';
import { cp, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkApiChanges } from '../../src/cli/api-gate.ts';

/**
 * The breaking-change gate (src/cli/api-gate.ts): the generated document against the released one
 * (spec/released/), as CI runs it, and what it says when a change to spec/ breaks a client.
 */
const root = path.resolve(import.meta.dirname, '../..');
const RELEASED = path.join(root, 'spec/released/openapi-v1.json');
const GENERATED = path.join(root, 'generated/openapi.json');
const CHANGELOG = path.join(root, 'spec/CHANGELOG.md');
const run = promisify(execFile);

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'api-gate-'));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Compiles a copy of spec/ changed by `change` (file → new text) the way `make generate` does; returns the document's path. */
async function generateChanged(change: (file: string, text: string) => string, files: string[]): Promise<string> {
  const copy = path.join(dir, 'project');
  await cp(path.join(root, 'spec'), path.join(copy, 'spec'), { recursive: true });
  await symlink(path.join(root, 'node_modules'), path.join(copy, 'node_modules'), 'dir');
  for (const file of files) {
    const at = path.join(copy, 'spec', file);
    await writeFile(at, change(file, await readFile(at, 'utf8')));
  }
  const out = path.join(copy, 'generated');
  const bin = (name: string) => path.join(root, 'node_modules', '.bin', name);
  await run(bin('tsp'), ['compile', path.join(copy, 'spec'), '--config', path.join(copy, 'spec/tspconfig.yaml'), '--option', `@typespec/openapi3.emitter-output-dir=${out}`]);
  await run(process.execPath, [path.join(root, 'src/cli/normalize-openapi.ts'), path.join(out, 'openapi.json')]);
  return path.join(out, 'openapi.json');
}

describe('the breaking-change gate', () => {
  it('passes the generated document against the released one', async () => {
    expect(await checkApiChanges(RELEASED, GENERATED, CHANGELOG)).toMatchObject({ passed: true });
  }, 60_000);

  it('fails when a response field is deleted from spec/, naming the field and the operations it breaks', async () => {
    const withoutField = (_file: string, text: string) => text.replace(/^\s*selection_reason: .*\n/gm, '');
    const broken = await generateChanged(withoutField, ['deployments/models.tsp', 'deployments/operations.tsp']);
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
