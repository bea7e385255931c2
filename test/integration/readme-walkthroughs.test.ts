import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../helpers/database.ts';
import { freePort, waitUntil } from '../helpers/net.ts';
import { missingOutcomes, readmeBlocks, runWalkthrough } from '../helpers/readme.ts';

/**
 * README.md's quick start, run literally (issue #31): its marked blocks, in order, in one bash
 * against a service started as `make run` starts it (`node src/main.ts` with NODE_ENV=development:
 * the cluster simulators, the Stripe emulator and MailDev as local stand-ins), every port taken from
 * the environment. A README that drifts from the product fails here. Only the database differs from
 * `make run`: a fresh copy of the suite's migrated one instead of an embedded Postgres of its own.
 */
/** The environment without these variables (the machine's own must not leak into a run of the README). */
const withoutVariables = (env: NodeJS.ProcessEnv, names: readonly string[]): NodeJS.ProcessEnv =>
  Object.fromEntries(Object.entries(env).filter(([name]) => !names.includes(name)));

let service: ChildProcess;
let output = '';
let port: number;
let work: string;
let database: Awaited<ReturnType<typeof createTestDatabase>>;

beforeAll(async () => {
  database = await createTestDatabase();
  port = await freePort();
  const ports = {
    PORT: port,
    CLUSTER_SIMULATOR_PORT: await freePort(),
    CLUSTER_SIMULATOR_HOSTED_PORT: await freePort(),
    STRIPE_EMULATOR_PORT: await freePort(),
    MAILDEV_SMTP_PORT: await freePort(),
    MAILDEV_WEB_PORT: await freePort(),
  };
  const env = withoutVariables(process.env, ['METRICS_PORT', 'PUBLIC_URL', 'WEB_APP_URL', 'SMTP_URL', 'STRIPE_SECRET_KEY', 'APP_SECRET']);
  Object.assign(env, { NODE_ENV: 'development', LOG_LEVEL: 'info', DATABASE_URL: database.url });
  service = spawn(process.execPath, ['src/main.ts'], { env: { ...env, ...Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])) }, stdio: ['ignore', 'pipe', 'pipe'] });
  service.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  service.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  await waitUntil(async () => /"msg":"started"/.test(output), () => `the service to start\n${output}`, 60_000);
  // The reader's project: a folder of its own where `openai` is installed (the suite's node_modules).
  work = await mkdtemp(path.join(tmpdir(), 'readme-quick-start-'));
  await symlink(path.resolve('node_modules'), path.join(work, 'node_modules'));
}, 90_000);

afterAll(async () => {
  if (service && service.exitCode === null) {
    const exited = new Promise((resolve) => service.once('exit', resolve));
    service.kill('SIGTERM');
    await exited;
  }
  if (work) await rm(work, { recursive: true, force: true });
  await database?.drop();
});

describe('the README quick start, as a reader runs it', () => {
  it('registers, plans, deploys to running and answers the openai call, each step printing what the README says', async () => {
    const blocks = await readmeBlocks('quick-start');
    // The test's own Node first on PATH (the project's Node 24, as `make run` puts it first).
    const env = { ...withoutVariables(process.env, ['OPENAI_API_KEY', 'OPENAI_BASE_URL']), PORT: String(port), PATH: `${path.dirname(process.execPath)}:${process.env.PATH ?? ''}` };
    const result = await runWalkthrough(blocks, { cwd: work, env, timeoutMs: 120_000, writeFile: (name, text) => writeFile(path.join(work, name), text) });
    const report = () => `exit ${result.code}\n${result.runs.map((run) => `--- README.md:${run.block.line}\n${run.output}`).join('\n')}\nstderr:\n${result.stderr}\nservice:\n${output.slice(-4000)}`;
    expect(result.code, report()).toBe(0);
    expect(result.runs.length).toBeGreaterThanOrEqual(4);
    for (const run of result.runs) expect(missingOutcomes(run), `README.md:${run.block.line}\n${report()}`).toEqual([]);
    // Every step that documents an outcome was checked; the last one is the openai call's answer.
    expect(result.runs.filter((run) => run.block.expected.length > 0).length).toBeGreaterThanOrEqual(4);
    expect(result.runs.at(-1)?.block.code).toContain('node hello.mjs');
  }, 150_000);
});
