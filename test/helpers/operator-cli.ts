import { spawn } from 'node:child_process';
import { once } from 'node:events';
import type { TestApp } from './app.ts';

/** The real operator CLI in a process of its own, on the app's database: its exit code, stdout and stderr. */
export async function operatorCli(app: Pick<TestApp, 'env' | 'databaseUrl'>, ...argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['src/cli/operator.ts', ...argv], {
    env: { ...process.env, NODE_ENV: 'test', APP_SECRET: app.env.APP_SECRET, DATABASE_URL: app.databaseUrl, LOG_LEVEL: 'silent' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const [code] = await once(child, 'exit');
  return { code: code as number, stdout, stderr };
}
