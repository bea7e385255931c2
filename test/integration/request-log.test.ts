import type { Server } from 'node:http';
import { connect } from 'node:net';
import type { Logger } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../src/app.ts';
import { securityHandlers } from '../../src/container.ts';
import { buildHandlers } from '../../src/handlers.ts';
import { closeServer, listen } from '../../src/http/server.ts';
import { createLogger } from '../../src/logger.ts';
import { offlineContainer } from '../helpers/app.ts';
import { waitUntil } from '../helpers/net.ts';

/**
 * Request ids and access lines (src/http/request-log.ts) on the real document, with a container
 * whose database does not answer: a route that reads the database answers 5xx.
 */
async function serve(level: string) {
  const lines: string[] = [];
  const logger = createLogger(level, { write: (line: string) => void lines.push(line) });
  let children = 0;
  const child = logger.child.bind(logger);
  logger.child = ((...args: Parameters<Logger['child']>) => {
    children++;
    return child(...args);
  }) as Logger['child'];
  const container = offlineContainer();
  const app = await createApp({
    logger,
    document: container.document,
    handlers: buildHandlers(container),
    security: securityHandlers(container),
    allowedOrigins: [],
    trustProxy: false,
    validateResponses: true,
  });
  const server: Server = await listen(app, 0, '127.0.0.1');
  const address = server.address();
  return {
    url: `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`,
    lines: () => lines.map((line) => JSON.parse(line) as Record<string, unknown>),
    raw: () => lines.join(''),
    children: () => children,
    close: async () => {
      await closeServer(server, 1_000);
      await container.db.destroy();
    },
  };
}

describe('request log at info', () => {
  let app: Awaited<ReturnType<typeof serve>>;
  beforeAll(async () => (app = await serve('info')));
  afterAll(() => app.close());

  it('keeps a well-formed inbound X-Request-Id, echoes it, and logs the route template instead of the URL', async () => {
    const response = await fetch(`${app.url}/v1/invitations/by-token/inv-secret-token-0123456789?next=also-secret`, {
      headers: { 'x-request-id': 'client-request-0001', authorization: 'Bearer svc-sk-notarealkey', cookie: 'session=session-secret' },
    });
    // An unknown query parameter: refused before the database is asked.
    expect(response.status).toBe(422);
    expect(response.headers.get('x-request-id')).toBe('client-request-0001');
    const line = app.lines().find((entry) => entry.msg === 'request' && entry.request_id === 'client-request-0001');
    expect(line).toMatchObject({ level: 30, method: 'GET', route: 'GET /v1/invitations/by-token/{token}', status: 422 });
    expect(app.raw()).not.toMatch(/inv-secret-token|also-secret|svc-sk-notarealkey|session-secret/);
  });

  it('logs a client that left in the middle of its body as 499, not as an unhandled error', async () => {
    const { port } = new URL(app.url);
    const socket = connect(Number(port), '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    // 10 of the 100 bytes it announced, then gone.
    socket.write('POST /v1/user/signin HTTP/1.1\r\nHost: localhost\r\nX-Request-Id: client-left-midway-01\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"email":"');
    socket.destroy();
    const ours = () => app.lines().filter((entry) => entry.request_id === 'client-left-midway-01');
    await waitUntil(async () => ours().some((entry) => entry.msg === 'request'), 'the request line of the client that left');
    expect(ours().find((entry) => entry.msg === 'request')).toMatchObject({ level: 30, status: 499, route: 'POST /v1/user/signin' });
    expect(ours().filter((entry) => entry.msg !== 'request')).toEqual([]);
    expect(app.raw()).not.toContain('unhandled error');
  });

  it('replaces a malformed inbound X-Request-Id with its own', async () => {
    const response = await fetch(`${app.url}/openapi.json`, { headers: { 'x-request-id': 'bad id with spaces' } });
    const id = response.headers.get('x-request-id');
    expect(id).toMatch(/^req_[0-9a-f]{32}$/);
    expect(app.lines()).toContainEqual(expect.objectContaining({ msg: 'request', request_id: id, level: 30, route: 'GET /openapi.json', status: 200 }));
  });

  it('redacts credentials from any request or response headers logged', () => {
    const lines: string[] = [];
    createLogger('info', { write: (line: string) => void lines.push(line) }).info(
      { req: { headers: { authorization: 'Bearer a', cookie: 'session=b', 'x-csrf-token': 'c' } }, res: { headers: { 'set-cookie': 'session=d' } } },
      'headers',
    );
    expect(JSON.parse(lines[0] as string)).toMatchObject({
      req: { headers: { authorization: '[redacted]', cookie: '[redacted]', 'x-csrf-token': '[redacted]' } },
      res: { headers: { 'set-cookie': '[redacted]' } },
    });
  });
});

describe('request log at warn', () => {
  let app: Awaited<ReturnType<typeof serve>>;
  beforeAll(async () => (app = await serve('warn')));
  afterAll(() => app.close());

  it('makes no child logger and writes nothing for an answer below 500', async () => {
    const before = app.children();
    const response = await fetch(`${app.url}/openapi.json`);
    expect(response.status).toBe(200);
    expect(response.headers.get('x-request-id')).toMatch(/^req_/);
    expect(app.children()).toBe(before);
    expect(app.lines()).toEqual([]);
  });

  it('still writes the line of a 5xx answer, with its route template', async () => {
    const response = await fetch(`${app.url}/v1/invitations/by-token/inv-secret-token-0123456789`);
    expect(response.status).toBe(500);
    expect(app.lines().filter((line) => line.msg === 'request')).toEqual([
      expect.objectContaining({ level: 50, route: 'GET /v1/invitations/by-token/{token}', status: 500, request_id: response.headers.get('x-request-id') }),
    ]);
    expect(app.raw()).not.toContain('inv-secret-token');
  });
});
