import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { completeCheckoutSession } from '../../dev/stripe/complete-checkout.ts';
import { chromiumMissing, launchChromium } from '../helpers/chromium.ts';
import { createTestDatabase } from '../helpers/database.ts';
import { freePort, waitUntil } from '../helpers/net.ts';
import { missingOutcomes, readmeBlocks, runWalkthrough } from '../helpers/readme.ts';

/**
 * README.md's walkthroughs, run literally: the quick start and the walkthroughs that
 * build on it (key limits, billing set-up), their marked blocks in order in one bash, against a
 * service started as `make run` starts it (`node dev/main.ts` with NODE_ENV=development: the cluster
 * simulators, the Stripe emulator and MailDev as local stand-ins), every port taken from the
 * environment. The one step a reader does in a browser (saving a card on the emulator's Checkout
 * page) is done in headless Chromium. A README that drifts from the product fails here. Only the
 * database differs from `make run`: a fresh copy of the suite's migrated one instead of an embedded
 * Postgres of its own. (The webhooks walkthrough cannot run here: its endpoint must be an https URL
 * that resolves to a public address.)
 */

/**
 * The reader saves the test card on the Checkout page whose address the block printed: in headless
 * Chromium, or, on a machine without it, with the POST its form sends.
 */
async function saveCardAtCheckout(output: string): Promise<void> {
  const address = /open (http:\/\/\S+)/.exec(output)?.[1];
  if (!address) throw new Error(`no Checkout address in\n${output}`);
  if (chromiumMissing) {
    await completeCheckoutSession(address);
    return;
  }
  const browser = await launchChromium();
  try {
    const page = await browser.newPage();
    await page.goto(address);
    await page.fill('input[name=card_number]', '4242 4242 4242 4242');
    await page.fill('input[name=card_expiry]', '12 / 34');
    await page.fill('input[name=card_cvc]', '123');
    await Promise.all([page.waitForURL((url) => !url.pathname.startsWith('/checkout/')), page.click('button[type=submit]')]);
  } finally {
    await browser.close();
  }
}
/** The environment without these variables (the machine's own must not leak into a run of the README). */
const withoutVariables = (env: NodeJS.ProcessEnv, names: readonly string[]): NodeJS.ProcessEnv =>
  Object.fromEntries(Object.entries(env).filter(([name]) => !names.includes(name)));

let service: ChildProcess;
let output = '';
let port: number;
let stripePort: number;
let mailWebPort: number;
let work: string;
let database: Awaited<ReturnType<typeof createTestDatabase>>;

/**
 * Starts `node dev/main.ts` as `make run` does, every port free a moment before; once more on new
 * ports when another process took one of them in that moment (EADDRINUSE), as tests run in parallel.
 */
async function startAsMakeRun(databaseUrl: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    port = await freePort();
    stripePort = await freePort();
    mailWebPort = await freePort();
    const ports = {
      PORT: port,
      CLUSTER_SIMULATOR_PORT: await freePort(),
      CLUSTER_SIMULATOR_HOSTED_PORT: await freePort(),
      STRIPE_EMULATOR_PORT: stripePort,
      MAILDEV_SMTP_PORT: await freePort(),
      MAILDEV_WEB_PORT: mailWebPort,
    };
    const env = withoutVariables(process.env, ['METRICS_PORT', 'PUBLIC_URL', 'WEB_APP_URL', 'SMTP_URL', 'STRIPE_SECRET_KEY', 'APP_SECRET']);
    Object.assign(env, { NODE_ENV: 'development', LOG_LEVEL: 'info', DATABASE_URL: databaseUrl }, Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])));
    output = '';
    service = spawn(process.execPath, ['dev/main.ts'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    service.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    service.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<void>((resolve) => service.once('exit', () => resolve()));
    await waitUntil(async () => /"msg":"started"/.test(output) || service.exitCode !== null, () => `the service to start\n${output}`, 60_000);
    if (service.exitCode === null) return;
    await exited;
    if (!output.includes('EADDRINUSE') || attempt === 3) throw new Error(`the service did not start\n${output}`);
  }
}

beforeAll(async () => {
  database = await createTestDatabase();
  await startAsMakeRun(database.url);
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

describe('the README walkthroughs, as a reader runs them', () => {
  it('registers, plans, deploys to running, answers the openai call, sets key limits and sets up payment, each step printing what the README says', async () => {
    const blocks = await readmeBlocks();
    expect(new Set(blocks.map((block) => block.walkthrough))).toEqual(new Set(['quick-start', 'key-limits', 'billing']));
    // The test's own Node first on PATH (the project's Node 24, as `make run` puts it first).
    const env = { ...withoutVariables(process.env, ['OPENAI_API_KEY', 'OPENAI_BASE_URL']), PORT: String(port), STRIPE_EMULATOR_PORT: String(stripePort), MAILDEV_WEB_PORT: String(mailWebPort), PATH: `${path.dirname(process.execPath)}:${process.env.PATH ?? ''}` };
    const result = await runWalkthrough(blocks, { cwd: work, env, timeoutMs: 120_000, writeFile: (name, text) => writeFile(path.join(work, name), text), steps: { checkout: saveCardAtCheckout } });
    const report = () => `exit ${result.code}\n${result.runs.map((run) => `--- README.md:${run.block.line}\n${run.output}`).join('\n')}\nstderr:\n${result.stderr}\nservice:\n${output.slice(-4000)}`;
    expect(result.code, report()).toBe(0);
    for (const run of result.runs) expect(missingOutcomes(run), `README.md:${run.block.line}\n${report()}`).toEqual([]);
    // The documented outcomes were checked (the openai call's answer among them).
    expect(result.runs.filter((run) => run.block.expected.length > 0).length).toBeGreaterThanOrEqual(6);
    expect(result.runs.some((run) => run.block.code.includes('node hello.mjs') && run.output.startsWith('stop true'))).toBe(true);
  }, 150_000);
});
