import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, waitUntil } from './net.ts';

const require = createRequire(import.meta.url);
const PRISM = path.join(path.dirname(require.resolve('@stoplight/prism-cli/package.json')), 'dist', 'index.js');
export const DOCUMENT = fileURLToPath(new URL('../../generated/openapi.json', import.meta.url));

export interface PrismMock {
  url: string;
  close(): void;
}

/** Prism's mock of generated/openapi.json on a free loopback port, as frontend and SDK teams run it. */
export async function startPrism(document = DOCUMENT): Promise<PrismMock> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  let output = '';
  const prism = spawn(process.execPath, [PRISM, 'mock', '--host', '127.0.0.1', '--port', String(port), document], { stdio: ['ignore', 'pipe', 'pipe'] });
  prism.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  prism.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  await waitUntil(async () => (await fetch(`${url}/healthz`)).ok, () => `Prism to serve the document\n${output}`, 60_000);
  return { url, close: () => prism.kill() };
}
