import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { embeddedPostgresUrl, startEmbeddedPostgres, type RunningPostgres } from '../../src/db/embedded-postgres.ts';
import { createLogger } from '../../src/logger.ts';
import { freePort } from '../helpers/net.ts';
import { operatorCliIn, type CliOutcome } from '../helpers/operator-cli.ts';

/** A stack trace's frame, or a log line (knex's warnings came as JSON log lines with stacks). */
const NOISE = /^\s+at \S|^\{"level"/m;

/** One line on stderr and nothing on stdout, exit code 1. */
function failedInOneLine(outcome: CliOutcome, what: RegExp): void {
  expect(outcome.code, outcome.stderr).toBe(1);
  expect(outcome.stdout).toBe('');
  expect(outcome.stderr).toMatch(what);
  expect(outcome.stderr.trimEnd().split('\n')).toHaveLength(1);
  expect(outcome.stderr).not.toMatch(NOISE);
}

describe('the operator CLI without a database', () => {
  it.each([['--help'], ['help'], ['-h']])('%s prints every command and flag on stdout, with no database and no APP_SECRET', async (flag) => {
    // Production without APP_SECRET, DATABASE_URL pointing nowhere: neither is looked at.
    const outcome = await operatorCliIn({ NODE_ENV: 'production', DATABASE_URL: `postgres://postgres@127.0.0.1:${await freePort()}/none` }, flag);
    expect(outcome).toMatchObject({ code: 0, stderr: '' });
    for (const command of ['cluster register', 'cluster check', 'cluster sync', 'cluster list', 'model enable', 'model disable', 'model restrict', 'hosted launch', 'hosted list', 'prices list', 'prices set']) {
      expect(outcome.stdout).toContain(command);
    }
    for (const option of ['--name', '--endpoint', '--provider', '--region', '--auth', '--admin-user', '--admin-password-env', '--api-key-env', '--insecure-http', '--hosted', '--organizations']) {
      expect(outcome.stdout).toContain(option);
    }
  });

  it.each([
    ['no command', [], /^no command given\n\nUsage: npm run cli/],
    ['an unknown command', ['cluster', 'frobnicate'], /^unknown command "cluster frobnicate"\n\nUsage: npm run cli/],
    ['an unknown option', ['cluster', 'list', '--verbose'], /^Unknown option '--verbose'.*\n\nUsage: npm run cli/],
    ['a flag without its value', ['cluster', 'sync', '--name'], /^Option '--name <value>' argument missing\n\nUsage: npm run cli/],
  ])('refuses %s with exit code 2 and the usage on stderr, before any database', async (_what, argv, message) => {
    const outcome = await operatorCliIn({ NODE_ENV: 'production' }, ...argv);
    expect(outcome.code).toBe(2);
    expect(outcome.stdout).toBe('');
    expect(outcome.stderr).toMatch(message);
    expect(outcome.stderr).toContain('Commands:');
  });

  it('ends a malformed DATABASE_URL in one line naming it', async () => {
    failedInOneLine(await operatorCliIn({ NODE_ENV: 'test', DATABASE_URL: 'postgres://no host here' }, 'cluster', 'list'), /DATABASE_URL: Invalid URL/);
  });

  it('ends a refused connection in one line naming DATABASE_URL (its password hidden) and the cause', async () => {
    const port = await freePort();
    const outcome = await operatorCliIn({ NODE_ENV: 'test', DATABASE_URL: `postgres://postgres:secret@127.0.0.1:${port}/none` }, 'cluster', 'list');
    failedInOneLine(outcome, new RegExp(`^Cannot use the database, DATABASE_URL \\(postgres://postgres:\\*\\*\\*@127\\.0\\.0\\.1:${port}/none\\): connect ECONNREFUSED 127\\.0\\.0\\.1:${port}\\n$`));
  });
});

describe('the operator CLI beside `make run`', () => {
  // The embedded Postgres `make run` starts: DATA_DIR/postgres, database model_deployment, password auth.
  let dataDir: string;
  let port: number;
  let running: RunningPostgres;
  beforeAll(async () => {
    dataDir = await mkdtemp(path.join(tmpdir(), 'mds-cli-data-'));
    await chmod(dataDir, 0o755); // run as root, the server runs as the postgres user
    port = await freePort();
    running = await startEmbeddedPostgres({ dataDir: path.join(dataDir, 'postgres'), port, database: 'model_deployment', persistent: true, log: createLogger('silent') });
  }, 120_000);
  afterAll(async () => {
    await running?.stop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('uses the running embedded Postgres of DATA_DIR (NODE_ENV=development, no DATABASE_URL), and leaves it running', async () => {
    // EMBEDDED_PG_PORT is not the running server's: the port comes from the server itself.
    const env = { NODE_ENV: 'development', DATA_DIR: dataDir, EMBEDDED_PG_PORT: String(await freePort()) };
    const listed = await operatorCliIn(env, 'prices', 'list');
    expect(listed.stderr).toBe('');
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain('platform::hosted_model:qwen2.5-instruct::\thosted_tokens');
    const set = await operatorCliIn(env, 'prices', 'set', 'platform::hosted_model:qwen2.5-instruct::', '0.0000004');
    expect(set.code, set.stderr).toBe(0);
    // The same database, still up: what the CLI wrote is there.
    const again = await operatorCliIn({ NODE_ENV: 'test', DATABASE_URL: embeddedPostgresUrl(port, 'model_deployment') }, 'prices', 'list');
    expect(again.stdout).toContain('platform::hosted_model:qwen2.5-instruct::\thosted_tokens\t0.000000400000 usd/token');
  });

  it('ends a wrong password in one line naming DATABASE_URL and what the server said', async () => {
    const outcome = await operatorCliIn({ NODE_ENV: 'test', DATABASE_URL: `postgres://postgres:wrong@127.0.0.1:${port}/model_deployment` }, 'cluster', 'list');
    failedInOneLine(outcome, /^Cannot use the database, DATABASE_URL \(postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:\d+\/model_deployment\): password authentication failed for user "postgres"\n$/);
  });
});
