import { randomBytes } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/**
 * The processes one benchmark run starts (simulator, service, operator CLI): each one's output goes
 * to its own log file, and every one still running is stopped when the run ends, also on failure.
 */

export interface Started {
  name: string;
  child: ChildProcess;
  pid: number;
  logPath: string;
  /** Resolves with the exit code (or the signal's name) once the process has exited. */
  exited: Promise<number | string>;
  /** Everything it printed on stdout so far. */
  stdout(): string;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once it has exited. */
  stop(graceMs?: number): Promise<void>;
}

const running = new Set<Started>();

export function start(name: string, args: string[], options: { env: NodeJS.ProcessEnv; logPath: string; cwd?: string }): Started {
  const child = spawn(process.execPath, args, { env: options.env, cwd: options.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  if (child.pid === undefined) throw new Error(`${name} did not start`);
  const log = createWriteStream(options.logPath);
  let out = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    out += chunk.toString('utf8');
    log.write(chunk);
  });
  child.stderr?.on('data', (chunk: Buffer) => log.write(chunk));
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => {
      resolve(code ?? signal ?? 'unknown');
    });
  });
  const started: Started = {
    name,
    child,
    pid: child.pid,
    logPath: options.logPath,
    exited,
    stdout: () => out,
    async stop(graceMs = 10_000) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
        await exited;
        clearTimeout(timer);
      }
      running.delete(started);
      // Let the last lines reach the file.
      await new Promise<void>((resolve) => log.end(resolve));
    },
  };
  running.add(started);
  void exited.then(() => running.delete(started));
  return started;
}

/** Stops every process this module started that is still running, the most recent first. */
export async function stopAll(): Promise<void> {
  for (const started of [...running].reverse()) {
    try {
      await started.stop();
    } catch {
      started.child.kill('SIGKILL');
    }
  }
}

/** Runs a command to completion; rejects with its output when it fails. */
export async function run(name: string, args: string[], options: { env: NodeJS.ProcessEnv; logPath: string; timeoutMs?: number }): Promise<string> {
  const started = start(name, args, options);
  const timer = setTimeout(() => started.child.kill('SIGKILL'), options.timeoutMs ?? 60_000);
  const code = await started.exited;
  clearTimeout(timer);
  await started.stop();
  if (code !== 0) throw new Error(`${name} exited with ${code}:\n${tail(options.logPath)}`);
  return started.stdout();
}

/** Resolves with the first stdout line matching `pattern`; rejects if the process exits first or the time runs out. */
export async function waitForLine(started: Started, pattern: RegExp, timeoutMs: number): Promise<RegExpExecArray> {
  const deadline = Date.now() + timeoutMs;
  let exited = false;
  void started.exited.then(() => (exited = true));
  for (;;) {
    const match = pattern.exec(started.stdout());
    if (match) return match;
    if (exited) throw new Error(`${started.name} exited before it was ready:\n${tail(started.logPath)}`);
    if (Date.now() > deadline) throw new Error(`${started.name} was not ready after ${timeoutMs} ms:\n${tail(started.logPath)}`);
    await sleep(25);
  }
}

/** Polls `probe` every `everyMs` until it returns true; rejects after `timeoutMs`, or when `alive` says the process is gone. */
export async function waitUntil(what: string, probe: () => Promise<boolean>, timeoutMs: number, alive?: Started, everyMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let exited = false;
  void alive?.exited.then(() => (exited = true));
  for (;;) {
    if (await probe().catch(() => false)) return;
    if (exited && alive) throw new Error(`${alive.name} exited while waiting for ${what}:\n${tail(alive.logPath)}`);
    if (Date.now() > deadline) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}${alive ? `:\n${tail(alive.logPath)}` : ''}`);
    await sleep(everyMs);
  }
}

/** The last lines of a log file, for error messages. */
export function tail(path: string, lines = 30): string {
  try {
    return readFileSync(path, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/** A loopback port that was free a moment ago. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (!address || typeof address === 'string') throw new Error('no free port');
  return address.port;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * The environment the benches run the built service with (it starts no local stand-in): production
 * settings on loopback, a fresh secret, response validation off, and an SMTP port nothing listens on
 * (no email is sent during a run). The caller adds what its run needs.
 */
export async function productionServiceEnv(options: { databaseUrl: string; role: 'api' | 'all' }): Promise<{ env: NodeJS.ProcessEnv; base: string }> {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    NODE_ENV: 'production',
    APP_SECRET: randomBytes(32).toString('base64url'),
    SMTP_URL: `smtp://127.0.0.1:${await freePort()}`,
    DATABASE_URL: options.databaseUrl,
    LOG_LEVEL: 'warn',
    RESPONSE_VALIDATION: 'false',
    HOST: '127.0.0.1',
    PORT: String(port),
    PUBLIC_URL: base,
    ALLOWED_ORIGINS: base,
    ROLE: options.role,
    SHUTDOWN_TIMEOUT_MS: '5000',
  };
  return { env, base };
}

/**
 * The Node flags of `npm start` (package.json): semi-spaces of at most 16 MB. V8 otherwise grows
 * them to 64 MB under load, which took the service's peak RSS from about 260 to 330-400 MB at 64
 * connections with no CPU saved (measured: 8 MB cut it to 220 MB but cost about 0.1 ms per request).
 * And the old generation grown by 20 % past what a full collection kept, not up to 4 times as V8
 * chooses under load: peak RSS at 64 connections 203-221 MB against 273-346 MB in interleaved
 * runs, for about 0.06 ms more CPU per request there (more frequent full collections).
 * Read from package.json's `start` script (`node <flags> dist/main.js`), so the benches run what
 * production runs; BENCH_SERVICE_NODE_FLAGS (space-separated) replaces them, to measure others.
 */
export const SERVICE_NODE_FLAGS = process.env.BENCH_SERVICE_NODE_FLAGS?.split(/\s+/).filter(Boolean) ?? startFlags();

function startFlags(): string[] {
  const { scripts } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { scripts: { start: string } };
  const words = scripts.start.trim().split(/\s+/);
  if (words[0] !== 'node' || words.at(-1) !== 'dist/main.js') throw new Error(`package.json's start script is not \`node <flags> dist/main.js\`: ${scripts.start}`);
  return words.slice(1, -1);
}
