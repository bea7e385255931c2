import { spawn } from 'node:child_process';
import { once } from 'node:events';
import type { TestApp } from './app.ts';

export interface CliOutcome {
  code: number;
  stdout: string;
  stderr: string;
}

/** The real operator CLI in a process of its own, on the app's database: its exit code, stdout and stderr. */
export async function operatorCli(app: Pick<TestApp, 'env' | 'databaseUrl'>, ...argv: string[]): Promise<CliOutcome> {
  return operatorCliIn({ NODE_ENV: 'test', APP_SECRET: app.env.APP_SECRET ?? '', DATABASE_URL: app.databaseUrl }, ...argv);
}

/**
 * The real operator CLI in a process of its own with exactly these settings (on top of PATH and the
 * like): a variable `env` leaves out is unset, a test run's DATABASE_URL and NODE_ENV included.
 */
export async function operatorCliIn(env: Record<string, string>, ...argv: string[]): Promise<CliOutcome> {
  const settings = new Set(['NODE_ENV', 'APP_SECRET', 'DATABASE_URL', 'DATA_DIR', 'EMBEDDED_PG_PORT', 'LOG_LEVEL']);
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !settings.has(name)));
  const child = spawn(process.execPath, ['src/cli/operator.ts', ...argv], {
    env: { ...inherited, LOG_LEVEL: 'silent', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const [code] = await once(child, 'exit');
  return { code: code as number, stdout, stderr };
}
