import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:http';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { closeServer } from '../../src/http/server.ts';
import { createJobQueue, startJobQueue, stopJobQueue } from '../../src/jobs/queue.ts';
import { createTestDatabase } from '../helpers/database.ts';
import { createLogger } from '../../src/logger.ts';
import { Inbox } from '../helpers/inbox.ts';
import { freePort, waitUntil } from '../helpers/net.ts';

function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

describe('graceful shutdown', () => {
  it('finishes an in-flight request and refuses new connections while closing', async () => {
    const release = deferred();
    const started = deferred();
    const server = createServer(async (_req, res) => {
      started.resolve();
      await release.promise;
      res.end('done');
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const address = server.address();
    const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;

    const inFlight = fetch(url).then((response) => response.text());
    await started.promise;
    let closed = false;
    const closing = closeServer(server, 10_000).then(() => (closed = true));
    await expect(fetch(url)).rejects.toThrow();
    expect(closed).toBe(false);

    release.resolve();
    expect(await inFlight).toBe('done');
    await closing;
    expect(closed).toBe(true);
  });

  it('lets a running job finish before the job queue stops', async () => {
    const database = await createTestDatabase();
    const url = database.url;
    const release = deferred();
    const started = deferred();
    const log = createLogger('silent');
    const boss = createJobQueue({ url, work: true, log });
    await startJobQueue(boss, {
      work: true,
      log,
      jobs: [
        {
          queue: 'test-graceful-stop',
          handle: async () => {
            started.resolve();
            await release.promise;
          },
        },
      ],
    });
    const jobId = await boss.send('test-graceful-stop', {});
    await started.promise;
    const stopping = stopJobQueue(boss, 10_000);
    release.resolve();
    await stopping;

    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query('select state from pgboss.job where id = $1', [jobId]);
      expect(rows).toEqual([{ state: 'completed' }]);
    } finally {
      await client.end();
      await database.drop();
    }
  });
});

describe('the service process', () => {
  it('starts, migrates, serves health, and exits 0 on SIGTERM', async () => {
    const port = await freePort();
    const database = await createTestDatabase();
    const inbox = await new Inbox().start();
    const child = spawn(process.execPath, ['src/main.ts'], {
      env: { ...process.env, DATABASE_URL: database.url, SMTP_URL: inbox.url, PORT: String(port), LOG_LEVEL: 'info', NODE_ENV: 'test' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = once(child, 'exit');
    try {
      await waitUntil(async () => (await fetch(`http://127.0.0.1:${port}/healthz`)).ok, `the service to answer\n${output}`);
      expect(output).toContain(`/docs`);
      child.kill('SIGTERM');
      const [code] = await exited;
      expect(code).toBe(0);
      expect(output).toContain('"msg":"stopped"');
    } finally {
      child.kill('SIGKILL');
      await inbox.stop();
      await database.drop();
    }
  });

  it('refuses to start with a bad setting and names it', async () => {
    const child = spawn(process.execPath, ['src/main.ts'], { env: { ...process.env, PORT: 'eighty' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const [code] = await once(child, 'exit');
    expect(code).toBe(1);
    expect(stderr).toMatch(/PORT/);
  });

  it('ends a start-up failure in one line naming its cause, without a stack', async () => {
    const closed = await freePort();
    const child = spawn(process.execPath, ['src/main.ts'], {
      env: { ...process.env, NODE_ENV: 'test', DATABASE_URL: `postgres://postgres@127.0.0.1:${closed}/none`, SMTP_URL: `smtp://127.0.0.1:${closed}`, PORT: '0', LOG_LEVEL: 'silent' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const [code] = await once(child, 'exit');
    expect(code).toBe(1);
    expect(stderr).toBe(`Start-up failed: connect ECONNREFUSED 127.0.0.1:${closed}\n`);
  });
});
