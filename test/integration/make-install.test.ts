import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmod, copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

/**
 * `make install` (the first step of `make run`) with the repository's Makefile, in a folder of its
 * own where `npm` is a stand-in that answers as npm 11 does on Node 20 for this lockfile: an
 * EBADENGINE warning (5 lines) for each of the 57 packages that need Node 22 or 24, another warning,
 * then the result; `node` answers v20.20.2 to --version.
 */
let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'mds-make-install-'));
  await copyFile('Makefile', path.join(dir, 'Makefile'));
  await writeFile(path.join(dir, 'package.json'), '{"name":"x"}\n');
  await writeFile(path.join(dir, 'package-lock.json'), '{"lockfileVersion":3}\n');
  const bin = path.join(dir, 'bin');
  await writeFile(
    path.join(dir, 'npm.sh'),
    `for i in $(seq 1 57); do
  printf "npm warn EBADENGINE Unsupported engine {\\nnpm warn EBADENGINE   package: 'p%s@1.0.0',\\nnpm warn EBADENGINE   required: { node: '>=22' },\\nnpm warn EBADENGINE   current: { node: 'v20.20.2', npm: '11.19.1' }\\nnpm warn EBADENGINE }\\n" "$i" >&2
done
echo "npm warn deprecated inflight@1.0.6: This module is not supported, and leaks memory." >&2
if [ -n "$NPM_FAILS" ]; then echo "npm error code E404" >&2; echo "npm error 404 Not Found - GET https://registry.npmjs.org/no-such-package" >&2; exit 1; fi
mkdir -p node_modules
echo "added 1213 packages in 8m"
`,
  );
  await mkdir(bin);
  await writeFile(path.join(bin, 'npm'), `#!/bin/sh\nexec sh "${path.join(dir, 'npm.sh')}" "$@"\n`);
  await writeFile(path.join(bin, 'node'), `#!/bin/sh\nif [ "$1" = --version ]; then echo v20.20.2; exit 0; fi\nexec "${process.execPath}" "$@"\n`);
  await chmod(path.join(bin, 'npm'), 0o755);
  await chmod(path.join(bin, 'node'), 0o755);
});
afterEach(() => rm(dir, { recursive: true, force: true }));

async function makeInstall(env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn('make', ['install'], {
    cwd: dir,
    env: { PATH: `${path.join(dir, 'bin')}:/usr/bin:/bin`, HOME: dir, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const [code] = await once(child, 'exit');
  return { code: code as number | null, stdout, stderr };
}

describe('make install on a machine with Node 20', () => {
  it('leaves out the EBADENGINE warnings, saying so in one line; other warnings and the result show', async () => {
    const { code, stdout, stderr } = await makeInstall();
    expect(code, stderr).toBe(0);
    const output = stdout + stderr;
    expect(output).not.toContain('EBADENGINE Unsupported engine');
    expect(output.match(/EBADENGINE warnings are expected until the project's Node 24 is installed/g)).toHaveLength(1);
    expect(stdout).toMatch(/^Installing with Node v20\.20\.2: /);
    expect(stdout).toContain('added 1213 packages in 8m');
    expect(stderr).toBe('npm warn deprecated inflight@1.0.6: This module is not supported, and leaks memory.\n');
    expect(await readFile(path.join(dir, 'node_modules', '.install-stamp'), 'utf8')).toMatch(/^[0-9a-f]{64}\n$/);
  });

  it('shows npm’s errors and fails, recording no install', async () => {
    const { code, stderr } = await makeInstall({ NPM_FAILS: '1' });
    expect(code).not.toBe(0);
    expect(stderr).toContain('npm error code E404');
    expect(stderr).toContain('npm error 404 Not Found - GET https://registry.npmjs.org/no-such-package');
    expect(stderr).not.toContain('EBADENGINE');
    await expect(readFile(path.join(dir, 'node_modules', '.install-stamp'), 'utf8')).rejects.toThrow();
  });
});
