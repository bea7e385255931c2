import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { connect } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';

export interface LocalInbox {
  smtpUrl: string;
  webUrl: string;
  stop(): Promise<void>;
}

/**
 * Local stand-in for an SMTP provider: MailDev (from devDependencies) catches every email the
 * service sends and shows it in a web inbox. Started by `make run` when `SMTP_URL` is not set.
 */
export async function startMailDev(options: { smtpPort: number; webPort: number; log: Logger }): Promise<LocalInbox> {
  const bin = path.join(path.dirname(fileURLToPath(import.meta.resolve('maildev'))), 'bin', 'maildev.js');
  const child = spawn(
    process.execPath,
    [bin, '--smtp', String(options.smtpPort), '--web', String(options.webPort), '--ip', '127.0.0.1', '--web-ip', '127.0.0.1', '--silent'],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = once(child, 'exit');
  const deadline = Date.now() + 15_000;
  while (!(await accepts(options.smtpPort))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill();
      throw new Error(`MailDev did not start on 127.0.0.1:${options.smtpPort} (set MAILDEV_SMTP_PORT or SMTP_URL): ${stderr.trim()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  options.log.info({ smtp_port: options.smtpPort, web_port: options.webPort }, 'MailDev (local stand-in) started');
  return {
    smtpUrl: `smtp://127.0.0.1:${options.smtpPort}`,
    webUrl: `http://localhost:${options.webPort}`,
    stop: async () => {
      if (child.exitCode === null) {
        child.kill('SIGTERM');
        await exited;
      }
    },
  };
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
