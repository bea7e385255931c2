import { existsSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APP_ORIGIN, TEST_APP_SECRET } from '../helpers/app.ts';
import { createTestDatabase } from '../helpers/database.ts';
import { Inbox } from '../helpers/inbox.ts';
import { startDevelopmentService, type DevelopmentService } from '../helpers/make-run.ts';
import { freePort, waitUntil } from '../helpers/net.ts';
import { startServiceProcess, type ServiceProcess } from '../helpers/service-process.ts';

/** The lines a crash leaves on the terminal (an unhandled error, a stack trace's frames), beside the JSON log lines. */
const crashLines = (output: string) =>
  output.split('\n').filter((line) => !line.startsWith('{') && /Unhandled|uncaught|^node:|^\s+at \S|^\w*Error\b|make: \*\*\*/i.test(line));

/** Registers a user (a write through the pool); `origin` is one the service allows. */
const register = (url: string, email: string, origin: string) =>
  fetch(`${url}/v1/user/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', origin },
    body: JSON.stringify({ email, password: 'correct horse battery staple', organization: `Org of ${email}` }),
  });

describe('make run (NODE_ENV=development, every local stand-in)', () => {
  let service: DevelopmentService;
  let metricsPort: number;
  beforeAll(async () => {
    metricsPort = await freePort();
    service = await startDevelopmentService({ METRICS_PORT: String(metricsPort) });
  }, 180_000);
  afterAll(() => service?.cleanUp());

  it('prints the metrics URL and the Stripe emulator’s secret key in its banner', async () => {
    const metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
    expect(service.output()).toMatch(new RegExp(`^ {2}Metrics +${metricsUrl.replaceAll('.', '\\.')}$`, 'm'));
    expect((await fetch(metricsUrl)).status).toBe(200);

    const key = /^ {2}Stripe key +(sk_test_emulator_[0-9a-f]+)\b/m.exec(service.output())?.[1];
    expect(key).toBeDefined();
    const advance = (authorization: string) =>
      fetch(`http://127.0.0.1:${service.env.STRIPE_EMULATOR_PORT}/_emulator/advance_time`, {
        method: 'POST',
        headers: { authorization, 'content-type': 'application/x-www-form-urlencoded' },
        body: 'seconds=1',
      });
    expect((await advance(`Bearer ${key}`)).status).toBe(200);
    expect((await advance('Bearer sk_test_emulator_not_the_key')).status).toBe(401);
  });

  it('stops cleanly on Ctrl-C (SIGINT to its whole process group): exit code 0, no unhandled error, Postgres stopped', async () => {
    // Connections in the pools, idle when the signal comes.
    expect((await register(service.url, `ctrl-c-${Date.now()}@example.com`, service.url.replace('127.0.0.1', 'localhost'))).status).toBe(201);
    service.signalGroup('SIGINT');
    const code = await service.exited;
    expect(service.output()).toContain('"msg":"stopped"');
    expect(crashLines(service.output())).toEqual([]);
    // The embedded Postgres did not get the signal: it stopped last, after every connection closed (none was cut).
    expect(service.output()).not.toContain('terminating connection due to administrator command');
    expect(code).toBe(0);
    // A clean shutdown of the embedded Postgres removes its pid file.
    expect(existsSync(path.join(service.env.DATA_DIR as string, 'postgres', 'postmaster.pid'))).toBe(false);
  }, 60_000);
});

describe('a database connection Postgres terminates', () => {
  let database: { url: string; drop(): Promise<void> };
  let inbox: Inbox;
  let service: ServiceProcess;
  beforeAll(async () => {
    database = await createTestDatabase();
    inbox = await new Inbox().start();
    const env = { NODE_ENV: 'test', APP_SECRET: TEST_APP_SECRET, PUBLIC_URL: APP_ORIGIN, ROLE: 'all' };
    service = await startServiceProcess({ env, databaseUrl: database.url, inbox }, {});
  });
  afterAll(async () => {
    service?.kill();
    await service?.exited;
    await inbox?.stop();
    await database?.drop();
  });

  it('does not crash the service: idle clients of the pools, the job queue and the change listener reconnect', async () => {
    const url = service.url as string;
    expect((await register(url, `before-${Date.now()}@example.com`, APP_ORIGIN)).status).toBe(201);
    const admin = new pg.Client({ connectionString: database.url });
    await admin.connect();
    try {
      const { rows } = await admin.query<{ terminated: boolean }>(
        'select pg_terminate_backend(pid) as terminated from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()',
      );
      expect(rows.length).toBeGreaterThan(2);
    } finally {
      await admin.end();
    }
    const exited = () => service.child.exitCode !== null || service.child.signalCode !== null;
    // The change listener noticed and listens again; by then every idle client had its error.
    await waitUntil(async () => exited() || /the change listener is listening again/.test(service.output()), () => `the change listener to reconnect\n${service.output()}`);
    expect(exited(), service.output()).toBe(false);
    await waitUntil(async () => (await register(url, `after-${Date.now()}@example.com`, APP_ORIGIN)).status === 201, 'a write to succeed again');
    expect(exited(), service.output()).toBe(false);
    expect(crashLines(service.output())).toEqual([]);
  });
});
