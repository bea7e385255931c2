import { execFile } from 'node:child_process';
import { cp, readFile, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

const root = path.resolve(import.meta.dirname, '../..');
const run = promisify(execFile);

/**
 * Compiles a copy of spec/ into `dir`, with `files` (paths under spec/) changed by `change`, the way
 * `make generate` does (TypeSpec, then the normalizer); returns the document's path. A compile error
 * rejects with TypeSpec's diagnostics in its `stdout`.
 */
export async function generateChangedSpec(dir: string, files: string[], change: (file: string, text: string) => string): Promise<string> {
  await cp(path.join(root, 'spec'), path.join(dir, 'spec'), { recursive: true });
  await symlink(path.join(root, 'node_modules'), path.join(dir, 'node_modules'), 'dir');
  for (const file of files) {
    const at = path.join(dir, 'spec', file);
    await writeFile(at, change(file, await readFile(at, 'utf8')));
  }
  const out = path.join(dir, 'generated');
  const tsp = path.join(root, 'node_modules', '.bin', 'tsp');
  await run(tsp, ['compile', path.join(dir, 'spec'), '--config', path.join(dir, 'spec/tspconfig.yaml'), '--option', `@typespec/openapi3.emitter-output-dir=${out}`]);
  await run(process.execPath, [path.join(root, 'src/cli/normalize-openapi.ts'), path.join(out, 'openapi.json')]);
  return path.join(out, 'openapi.json');
}
