import { spawn, type ChildProcess } from 'node:child_process';
import type { TestApp } from './app.ts';
import { waitUntil } from './net.ts';

/** Another process of the service (`node src/main.ts`) on the test app's database, as production runs several. */
export interface ServiceProcess {
  child: ChildProcess;
  /** `http://127.0.0.1:<port>` of its API; undefined for ROLE=worker. */
  url: string | undefined;
  /** Everything it printed so far (its JSON log lines). */
  output(): string;
  /** Resolves with its exit code once it has exited. */
  exited: Promise<number | null>;
  kill(signal?: NodeJS.Signals): void;
}

/**
 * Starts `node src/main.ts` with the test app's settings, database and SMTP listener (ROLE and any
 * setting overridden by `env`), and resolves once it logged `started`: for an API, with the port it
 * listens on. A process of a failed start is killed, its output in the error. `entry` names another
 * entry: `dev/main.ts`, as `make run` starts the service, with its local stand-ins.
 */
export async function startServiceProcess(
  app: Pick<TestApp, 'env' | 'databaseUrl' | 'inbox'>,
  env: Record<string, string>,
  entry: 'src/main.ts' | 'dev/main.ts' = 'src/main.ts',
): Promise<ServiceProcess> {
  const child = spawn(process.execPath, [entry], {
    env: { ...process.env, ...app.env, PORT: '0', DATABASE_URL: app.databaseUrl, SMTP_URL: app.inbox.url, LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  try {
    await waitUntil(async () => /"msg":"started"/.test(output), () => `the ${env.ROLE ?? app.env.ROLE} process to start\n${output}`);
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }
  const port = /"port":(\d+)[^\n]*"msg":"started"/.exec(output)?.[1];
  return {
    child,
    url: port ? `http://127.0.0.1:${port}` : undefined,
    output: () => output,
    exited,
    kill: (signal = 'SIGKILL') => void child.kill(signal),
  };
}
