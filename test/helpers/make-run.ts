import { spawn, type ChildProcess } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort, waitUntil } from './net.ts';

/** The service as `make run` starts it, in a terminal's process group of its own. */
export interface DevelopmentService {
  child: ChildProcess;
  /** Its settings: the ports and data directory of its stand-ins. */
  env: Record<string, string>;
  /** `http://127.0.0.1:<PORT>` */
  url: string;
  /** Everything it printed so far, stdout and stderr. */
  output(): string;
  stderr(): string;
  /** Resolves with its exit code (null when a signal ended it) once it has exited. */
  exited: Promise<number | null>;
  /** Sends `signal` to every process of its group, as a terminal's Ctrl-C does to `make run`'s. */
  signalGroup(signal: NodeJS.Signals): void;
  /** Ends whatever is left (the process group, the embedded Postgres of its data directory) and removes its data. */
  cleanUp(): Promise<void>;
}

/**
 * `NODE_ENV=development node dev/main.ts`, what `make run` runs after generating: no DATABASE_URL,
 * SMTP_URL or Stripe key, so it starts the embedded Postgres (data in a directory of its own),
 * MailDev, the Stripe emulator and the cluster simulator, each on a free port. It leads a process
 * group of its own (`detached`), as a shell running `make run` in a terminal does, so a signal to
 * the group reaches whatever it started in that group. Resolves once it printed its banner.
 */
export async function startDevelopmentService(env: Record<string, string> = {}): Promise<DevelopmentService> {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'mds-make-run-'));
  await chmod(dataDir, 0o755); // run as root, the embedded Postgres runs as the postgres user
  const port = await freePort();
  const settings: Record<string, string> = {
    NODE_ENV: 'development',
    PORT: String(port),
    DATA_DIR: dataDir,
    EMBEDDED_PG_PORT: String(await freePort()),
    MAILDEV_SMTP_PORT: String(await freePort()),
    MAILDEV_WEB_PORT: String(await freePort()),
    STRIPE_EMULATOR_PORT: String(await freePort()),
    CLUSTER_SIMULATOR_PORT: String(await freePort()),
    CLUSTER_SIMULATOR_HOSTED_PORT: String(await freePort()),
    CLUSTER_SIMULATOR_MODEL_LOAD_MS: '50',
    LOG_LEVEL: 'info',
    ...env,
  };
  // What would replace a stand-in (a test run's DATABASE_URL, say) is not passed on.
  const replacing = new Set(['DATABASE_URL', 'SMTP_URL', 'STRIPE_SECRET_KEY', 'STRIPE_PUBLISHABLE_KEY', 'STRIPE_WEBHOOK_SECRET', 'STRIPE_API_URL', 'APP_SECRET', 'METRICS_PORT']);
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !replacing.has(name)));
  const child = spawn(process.execPath, ['dev/main.ts'], { env: { ...inherited, ...settings }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let output = '';
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => {
    output += chunk.toString();
    stderr += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let gone = false;
  void exited.then(() => (gone = true));
  const signalGroup = (signal: NodeJS.Signals) => {
    try {
      process.kill(-(child.pid as number), signal);
    } catch {
      // the group is empty
    }
  };
  const cleanUp = async () => {
    signalGroup('SIGKILL');
    await stopLeftPostgres(path.join(dataDir, 'postgres'));
    await rm(dataDir, { recursive: true, force: true });
  };
  try {
    await waitUntil(async () => gone || /Swagger UI/.test(output), () => `the development service to print its banner\n${output}`, 120_000);
    if (gone) throw new Error(`the development service exited while starting\n${output}`);
  } catch (error) {
    await cleanUp();
    throw error;
  }
  return { child, env: settings, url: `http://127.0.0.1:${port}`, output: () => output, stderr: () => stderr, exited, signalGroup, cleanUp };
}

/** Stops (immediate shutdown) an embedded Postgres still running on `databaseDir`, if any. */
async function stopLeftPostgres(databaseDir: string): Promise<void> {
  const pid = Number((await readFile(path.join(databaseDir, 'postmaster.pid'), 'utf8').catch(() => '')).split('\n')[0]);
  if (!pid) return;
  try {
    process.kill(pid, 'SIGQUIT');
  } catch {
    return;
  }
  await waitUntil(
    async () => {
      try {
        process.kill(pid, 0);
        return false;
      } catch {
        return true;
      }
    },
    `the embedded Postgres ${pid} to stop`,
  );
}
