import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { Express } from 'express';
import { messageClassesOf } from './pipeline.ts';

/**
 * Listens on host:port and resolves with the server once it accepts connections. Its requests and
 * responses are made with the app's prototypes (pipeline.ts).
 */
export async function listen(app: Express, port: number, host: string): Promise<Server> {
  const server = createServer(messageClassesOf(app), app);
  server.listen(port, host);
  await once(server, 'listening');
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  return server;
}

/**
 * Stops accepting connections and waits for in-flight requests to finish. Idle keep-alive
 * connections close at once; requests still running after `timeoutMs` are cut off.
 */
export async function closeServer(server: Server, timeoutMs: number): Promise<void> {
  const closed = new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve())));
  server.closeIdleConnections();
  const force = setTimeout(() => server.closeAllConnections(), timeoutMs);
  try {
    await closed;
  } finally {
    clearTimeout(force);
  }
}
