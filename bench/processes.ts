import { randomBytes } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';

/**
 * The processes one benchmark run starts (simulator, service, operator CLI): each one's output goes
 * to its own log file, and every one still running is stopped when the run ends, also on failure.
 */

/** The repository's root: where the processes run and the results are written below. */
export const ROOT = path.resolve(import.meta.dirname, '..');

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

/** Fails the run unless the service is built: the benches run `dist/main.js`, as production does (their `make` target builds first). */
export function requireBuild(make: string): void {
  if (!existsSync(path.join(ROOT, 'dist', 'main.js'))) throw new Error(`dist/main.js is missing: run \`make build\` (${make} does)`);
}

/** The GPU cluster simulator of a run, with the secrets it was started with (the operator CLI registers it with them). */
export interface Simulator {
  process: Started;
  url: string;
  apiKey: string;
  adminPassword: string;
}

/**
 * The cluster simulator (dev/cluster-simulator.cli.ts) as its own process on a loopback port of its
 * choosing, one worker of `gpuCount` A10Gs, a fresh API key and admin password; resolves once it
 * prints its URL.
 */
export async function startSimulator(logs: string, options: { gpuCount: number; modelLoadMs: number; completionTokens: number; tokenLatencyMs: number }): Promise<Simulator> {
  const apiKey = `xf-${randomBytes(24).toString('hex')}`;
  const adminPassword = randomBytes(18).toString('base64url');
  const simulator = start(
    'simulator',
    [
      'dev/cluster-simulator.cli.ts',
      '--host', '127.0.0.1',
      '--port', '0',
      '--workers', JSON.stringify([{ name: 'bench-a10g-0', gpuName: 'NVIDIA A10G', gpuCount: options.gpuCount, gpuMemoryGb: 24 }]),
      '--model-load-ms', String(options.modelLoadMs),
      '--completion-tokens', String(options.completionTokens),
      '--token-latency-ms', String(options.tokenLatencyMs),
    ],
    // The secrets through the environment, not the command line (which process lists show).
    {
      cwd: ROOT,
      env: { ...process.env, LOG_LEVEL: 'warn', CLUSTER_SIMULATOR_API_KEY: apiKey, CLUSTER_SIMULATOR_ADMIN_PASSWORD: adminPassword },
      logPath: path.join(logs, 'simulator.log'),
    },
  );
  const url = (await waitForLine(simulator, /^(http:\/\/\S+)$/m, 15_000))[1] as string;
  return { process: simulator, url, apiKey, adminPassword };
}

/**
 * The built service as its own process, as in production (`npm start`: `node <SERVICE_NODE_FLAGS>
 * dist/main.js`; `nodeFlags` go first), on `env` (productionServiceEnv and what the run adds);
 * resolves once it answers /healthz.
 */
export async function startService(logs: string, options: { env: NodeJS.ProcessEnv; base: string; nodeFlags?: string[] }): Promise<Started> {
  const service = start('service', [...(options.nodeFlags ?? []), ...SERVICE_NODE_FLAGS, 'dist/main.js'], { cwd: ROOT, env: options.env, logPath: path.join(logs, 'service.log') });
  await waitUntil('the service to answer /healthz', async () => (await fetch(`${options.base}/healthz`)).ok, 60_000, service);
  return service;
}

/**
 * The simulator registered as a cluster and synced with the operator CLI (src/cli/operator.ts), as
 * an operator would, on the service's environment (`serviceEnv`: its database); the secrets through
 * the environment. What the CLI printed for each, one line each.
 */
export async function registerCluster(logs: string, serviceEnv: NodeJS.ProcessEnv, simulator: Simulator): Promise<string[]> {
  const operator = (args: string[], name: string) =>
    run(name, ['src/cli/operator.ts', ...args], {
      env: { ...serviceEnv, NODE_OPTIONS: process.env.NODE_OPTIONS, BENCH_SIMULATOR_KEY: simulator.apiKey, BENCH_SIMULATOR_ADMIN_PASSWORD: simulator.adminPassword },
      logPath: path.join(logs, `${name}.log`),
    });
  const cluster = 'bench-simulator';
  const registered = await operator(['cluster', 'register', '--name', cluster, '--endpoint', simulator.url, '--provider', 'local', '--region', 'bench', '--admin-user', 'admin', '--admin-password-env', 'BENCH_SIMULATOR_ADMIN_PASSWORD', '--api-key-env', 'BENCH_SIMULATOR_KEY'], 'operator-register');
  const synced = await operator(['cluster', 'sync', '--name', cluster], 'operator-sync');
  return [registered.trim(), synced.trim().replace(/\n/g, '; ')];
}
