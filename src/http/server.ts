import { once } from 'node:events';
import { createServer, IncomingMessage, ServerResponse, type Server } from 'node:http';
import type { Express } from 'express';

/** What the server answers with: its listener, and the Express app whose prototypes its requests and responses get. */
export interface HttpService {
  app: Express;
  listener: (req: IncomingMessage, res: ServerResponse) => void;
}

/**
 * Listens on host:port and resolves with the server once it accepts connections. Its requests and
 * responses are made with the app's prototypes, which both planes use (`messageClassesOf`).
 */
export async function listen(service: HttpService, port: number, host: string): Promise<Server> {
  const server = createServer(messageClassesOf(service.app), service.listener);
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

const messageClasses = new WeakMap<Express, { IncomingMessage: typeof IncomingMessage; ServerResponse: typeof ServerResponse }>();

/**
 * The classes of the requests and responses of `app`'s server (`http.createServer`'s
 * `IncomingMessage` and `ServerResponse` options): node:http's own, with Express's methods and
 * settings (`app.request`, `app.response`) on their prototype chain. Express gives each request and
 * response those prototypes after the fact (`Object.setPrototypeOf`, twice per request: 1 % of the
 * proxy's CPU at 64 connections, and objects whose prototype changed are slower to use after).
 */
export function messageClassesOf(app: Express): { IncomingMessage: typeof IncomingMessage; ServerResponse: typeof ServerResponse } {
  const known = messageClasses.get(app);
  if (known) return known;
  class AppRequest extends IncomingMessage {}
  class AppResponse<R extends IncomingMessage = IncomingMessage> extends ServerResponse<R> {}
  Object.setPrototypeOf(AppRequest.prototype, app.request);
  Object.setPrototypeOf(AppResponse.prototype, app.response);
  const classes = { IncomingMessage: AppRequest, ServerResponse: AppResponse };
  messageClasses.set(app, classes);
  return classes;
}
