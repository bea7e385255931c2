import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { TEST_APP_SECRET } from '../helpers/app.ts';
import { createTestDatabase } from '../helpers/database.ts';
import { freePort } from '../helpers/net.ts';

/**
 * A start-up failure ends in one clear line on stderr and a non-zero exit, never a stack trace:
 * `node dev/main.ts` as `make run` starts it (or the production entry, `src/main.ts`,
 * where said), with one thing wrong each time.
 */
async function start(env: Record<string, string>, entry = 'dev/main.ts'): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [entry], {
    // No local stand-in on a fixed port (MailDev, the Stripe emulator) that another test may hold.
    env: { PATH: process.env.PATH ?? '', NODE_ENV: 'test', APP_SECRET: TEST_APP_SECRET, LOG_LEVEL: 'silent', ROLE: 'api', SMTP_URL: 'smtp://127.0.0.1:9', STRIPE_EMULATOR: 'false', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, stderr };
}

function expectOneClearLine(result: { code: number | null; stderr: string }, message: RegExp): void {
  expect(result.code).not.toBe(0);
  expect(result.stderr).not.toMatch(/^\s+at /m);
  expect(result.stderr.trim().split('\n')).toHaveLength(1);
  expect(result.stderr).toMatch(message);
}

describe('start-up failures', () => {
  it('a port in use', async () => {
    const taken = createServer().listen(0, '127.0.0.1');
    await once(taken, 'listening');
    const address = taken.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    const database = await createTestDatabase();
    try {
      expectOneClearLine(await start({ PORT: String(port), DATABASE_URL: database.url }), /^Start-up failed: listen EADDRINUSE: address already in use 127\.0\.0\.1:\d+$/m);
    } finally {
      taken.close();
      await database.drop();
    }
  });

  it('Postgres unreachable', async () => {
    expectOneClearLine(await start({ DATABASE_URL: `postgres://postgres@127.0.0.1:${await freePort()}/none` }), /^Start-up failed: connect ECONNREFUSED/);
  });

  it('a bad setting', async () => {
    const result = await start({ NODE_ENV: 'production', APP_SECRET: 'short' });
    expect(result.code).not.toBe(0);
    expect(result.stderr).not.toMatch(/^\s+at /m);
    expect(result.stderr).toMatch(/APP_SECRET: must be at least 32 characters/);
  });

  it('the production entry without SMTP_URL outside production: it has no MailDev to start in its place', async () => {
    const result = await start({ NODE_ENV: 'development', SMTP_URL: '' }, 'src/main.ts');
    expect(result.code).not.toBe(0);
    expect(result.stderr).not.toMatch(/^\s+at /m);
    expect(result.stderr).toBe('Invalid configuration:\n  SMTP_URL: required (`make run` starts MailDev in its place)\n');
  });

  it.runIf(process.getuid?.() === 0)('run as root from a directory the postgres user cannot enter: one sentence saying what to do', async () => {
    const home = await mkdtemp(path.join(os.tmpdir(), 'home-700-'));
    try {
      const result = await start({ DATA_DIR: path.join(home, '.data'), EMBEDDED_PG_PORT: String(await freePort()) });
      expectOneClearLine(result, /the `postgres` user, who cannot enter .*home-700-.* \(mode 700\): run `make run` as a regular user/);
    } finally {
      await rm(home, { recursive: true, force: true });
    }
  });
});
