/**
 * The breaking-change gate (`make api-gate`, in CI, and test/contract/api-gate.test.ts): compares
 * the generated document with the released one (spec/released/) with Optic
 * (`optic diff <released> <generated> --check`, offline), which fails on what breaks a client of the
 * released document: a route, field or status removed, a type narrowed, a new required request
 * field. A break passes only when it is recorded: `info.version` (spec/main.tsp) raised to a new
 * major version and a section `## <that version>` in the API changelog (spec/CHANGELOG.md).
 *
 * Usage: node src/cli/api-gate.ts spec/released/openapi-v1.json generated/openapi.json spec/CHANGELOG.md
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const OPTIC = path.join(path.dirname(createRequire(import.meta.url).resolve('@useoptic/optic/package.json')), 'build', 'index.js');

export interface GateResult {
  passed: boolean;
  /** What broke (each break with its operation), or why the change passes. */
  message: string;
}

/** The breaks Optic reports, each as `<operation>: <rule's message>`. */
export function breaksIn(output: string): string[] {
  const breaks: string[] = [];
  let operation = '';
  // eslint-disable-next-line no-control-regex -- Optic colours its output.
  for (const line of output.replace(/\u001b\[[0-9;]*m/g, '').split('\n')) {
    const route = /^x ([A-Z]+ \S+?):?\s*$/.exec(line.trim());
    if (route) operation = route[1] as string;
    const rule = /^x \[(.+?)\] (.+)$/.exec(line.trim());
    if (rule) breaks.push(`${operation || 'the document'}: ${rule[2]} (${rule[1]})`);
  }
  return breaks;
}

const majorOf = (version: string) => Number(version.split('.')[0]);

/** Optic's breaks of `candidate` against `released`; [] when it reports none. */
async function opticBreaks(released: string, candidate: string): Promise<string[]> {
  // Optic reads settings from the environment (CI and token detection, telemetry): it gets only
  // what it needs, with telemetry off, so it runs offline and alike in CI, in tests and by hand.
  const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', OPTIC_TELEMETRY_LEVEL: 'off' };
  const result = await promisify(execFile)(process.execPath, [OPTIC, 'diff', released, candidate, '--check'], { env, maxBuffer: 64 * 1024 * 1024 }).then(
    ({ stdout }) => ({ code: 0, output: stdout }),
    (error: { code?: number; stdout?: string; stderr?: string }) => ({ code: error.code ?? -1, output: `${error.stdout ?? ''}${error.stderr ?? ''}` }),
  );
  const breaks = result.code === 0 ? [] : breaksIn(result.output);
  if (result.code !== 0 && (result.code !== 1 || !breaks.length)) throw new Error(`optic diff failed (exit ${result.code}):\n${result.output.slice(-2000)}`);
  return breaks;
}

type Document = { info: { version: string } } & Record<string, unknown>;

export async function checkApiChanges(released: string, generated: string, changelog: string): Promise<GateResult> {
  const read = async (file: string) => JSON.parse(await readFile(file, 'utf8')) as Document;
  const [before, after] = [await read(released), await read(generated)];
  const [from, to] = [before.info.version, after.info.version];
  // Optic lets anything through a new major version: it compares the document under the released
  // version, and the changelog decides.
  const dir = await mkdtemp(path.join(tmpdir(), 'api-gate-'));
  const candidate = path.join(dir, 'openapi.json');
  let breaks: string[];
  try {
    await writeFile(candidate, JSON.stringify({ ...after, info: { ...after.info, version: from } }));
    breaks = await opticBreaks(released, candidate);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  const recorded = new RegExp(`^## ${to.replaceAll('.', '\\.')}\\b`, 'm').test(await readFile(changelog, 'utf8').catch(() => ''));
  const listed = breaks.map((line) => `  - ${line}`).join('\n');
  if (!breaks.length) {
    if (to === from || recorded) return { passed: true, message: 'No change breaks a client of the released document.' };
    return { passed: false, message: `info.version is ${to} (released: ${from}) but ${path.basename(changelog)} has no section "## ${to}".` };
  }
  if (majorOf(to) > majorOf(from) && recorded) {
    return { passed: true, message: `Breaking changes recorded as version ${to} (released: ${from}):\n${listed}` };
  }
  return {
    passed: false,
    message:
      `The generated document breaks clients of the released one (${path.basename(released)}, version ${from}):\n${listed}\n` +
      `Keep the change compatible, or record it: raise info.version in spec/main.tsp to a new major version and add a section ` +
      `"## <that version>" to ${path.basename(changelog)} saying what changed and what clients do about it.`,
  };
}

const [released, generated, changelog] = process.argv.slice(2);
if (released && generated && changelog) {
  const { passed, message } = await checkApiChanges(released, generated, changelog);
  process.stdout.write(`${message}\n`);
  process.exitCode = passed ? 0 : 1;
}
