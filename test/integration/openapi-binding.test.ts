import type { Server } from 'node:http';
import type { Document } from 'openapi-backend';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../src/app.ts';
import { AppError } from '../../src/errors.ts';
import { buildHandlers } from '../../src/handlers.ts';
import { closeServer, listen } from '../../src/http/server.ts';
import type { Handlers } from '../../src/http/types.ts';
import { pino } from 'pino';
import { createLogger } from '../../src/logger.ts';
import { loadOpenApiDocument } from '../../src/openapi-document.ts';
import { securityHandlers } from '../../src/container.ts';
import { offlineContainer } from '../helpers/app.ts';
import { jsonOf, type Problem } from '../helpers/http.ts';

/**
 * The binding between a document and its handlers, on a small document of its own: query coercion
 * and defaults, path parameters, security failures, and response validation.
 */
const problem = { $ref: '#/components/schemas/Problem' };
const document = {
  openapi: '3.0.0',
  info: { title: 'binding test', version: '1' },
  paths: {
    '/items': {
      get: {
        operationId: 'listItems',
        'x-error-format': 'problem',
        parameters: [
          { name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1, maximum: 500, default: 100 } },
          { name: 'enabled_only', in: 'query', schema: { type: 'boolean', default: true } },
        ],
        responses: {
          200: {
            description: 'ok',
            content: {
              'application/json': {
                schema: {
                  type: 'object',
                  required: ['limit', 'enabled_only'],
                  properties: { limit: { type: 'integer' }, enabled_only: { type: 'boolean' } },
                },
              },
            },
          },
          default: { description: 'error', content: { 'application/json': { schema: problem } } },
        },
      },
    },
    '/search': {
      get: {
        operationId: 'search',
        'x-error-format': 'problem',
        // As the generated document states scalar query parameters (src/cli/normalize-openapi.ts drops TypeSpec's `explode: false`).
        parameters: [
          { name: 'q', in: 'query', schema: { type: 'string' } },
          { name: 'page', in: 'query', schema: { type: 'integer' } },
        ],
        responses: { 200: { description: 'ok', content: { 'application/json': { schema: { type: 'object' } } } } },
      },
    },
    '/go': {
      get: {
        operationId: 'go',
        'x-error-format': 'problem',
        parameters: [{ name: 'with_body', in: 'query', schema: { type: 'boolean', default: false } }],
        responses: {
          302: { description: 'redirect', headers: { Location: { schema: { type: 'string' } } } },
          default: { description: 'error', content: { 'application/json': { schema: problem } } },
        },
      },
    },
    '/items/{item_id}': {
      get: {
        operationId: 'getItem',
        'x-error-format': 'problem',
        parameters: [{ name: 'item_id', in: 'path', required: true, schema: { type: 'integer' } }],
        responses: {
          200: {
            description: 'ok',
            content: { 'application/json': { schema: { type: 'object', required: ['id'], properties: { id: { type: 'integer' } } } } },
          },
        },
      },
    },
    '/private': {
      get: {
        // A real session operation's id: the binding refuses one with no role (x-required-role).
        operationId: 'getSession',
        security: [{ SessionCookie: [] }],
        'x-required-role': 'signed-in',
        'x-error-format': 'problem',
        responses: { 200: { description: 'ok', content: { 'application/json': { schema: { type: 'object' } } } } },
      },
    },
    // Route rules read from the document alone: a small body limit, the hosted-inference error shape.
    '/echo': {
      post: {
        operationId: 'echo',
        'x-error-format': 'inference',
        'x-body-limit': 64,
        requestBody: { required: true, content: { 'application/json': { schema: { type: 'object' } } } },
        responses: { 200: { description: 'ok', content: { 'application/json': { schema: { type: 'object' } } } } },
      },
    },
    // Verified by a signature, like the payment processor's webhook: exempt from the Origin check.
    '/hook': {
      post: {
        operationId: 'hook',
        'x-error-format': 'problem',
        'x-body-limit': 1024,
        'x-csrf-exempt': true,
        requestBody: { required: true, content: { 'application/json': { schema: { type: 'object' } } } },
        responses: { 200: { description: 'ok', content: { 'application/json': { schema: { type: 'object' } } } } },
      },
    },
    // On its way out (x-deprecation): every answer says so.
    '/ping': {
      post: {
        operationId: 'ping',
        'x-error-format': 'problem',
        'x-deprecation': { since: '2026-11-01', sunset: '2027-07-01' },
        responses: { 200: { description: 'ok', content: { 'application/json': { schema: { type: 'object' } } } } },
      },
    },
  },
  components: {
    securitySchemes: { SessionCookie: { type: 'apiKey', in: 'cookie', name: 'session' } },
    schemas: loadOpenApiDocument().components?.schemas,
  },
} as unknown as Document;

const handlers = {
  listItems: ({ query }: { query: { limit: number; enabled_only: boolean } }) => ({ status: 200, body: query }),
  // Breaks its own contract on purpose: `id` must be an integer.
  getItem: ({ params }: { params: { item_id: number } }) => ({ status: 200, body: { id: params.item_id === 13 ? 'thirteen' : params.item_id } }),
  getSession: () => ({ status: 200, body: {} }),
  search: ({ query }: { query: object }) => ({ status: 200, body: query }),
  go: ({ query }: { query: { with_body: boolean } }) => ({ status: 302, body: query.with_body ? { to: 'x' } : undefined, headers: { Location: 'https://example.com/' } }),
  echo: ({ body }: { body: object }) => ({ status: 200, body }),
  hook: ({ req }: { req: { rawBody?: Buffer } }) => ({ status: 200, body: { raw: req.rawBody?.toString() } }),
  ping: ({ body }: { body: unknown }) => ({ status: 200, body: { read: body !== undefined } }),
} as unknown as Handlers;

describe('OpenAPI binding', () => {
  let server: Server;
  let url: string;
  beforeAll(async () => {
    const app = await createApp({
      logger: createLogger('silent'),
      document,
      handlers,
      security: {
        SessionCookie: () => {
          throw new AppError('UNAUTHENTICATED', 'Sign in to use this route.');
        },
        CsrfToken: () => undefined,
        ApiKeyBearer: () => undefined,
      },
      allowedOrigins: [],
      trustProxy: false,
      validateResponses: true,
    });
    server = await listen(app, 0, '127.0.0.1');
    const address = server.address();
    url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  });
  afterAll(() => closeServer(server, 1_000));

  it('coerces query strings to their schema types and fills defaults', async () => {
    expect(await jsonOf(await fetch(`${url}/items?limit=7&enabled_only=false`))).toEqual({ limit: 7, enabled_only: false });
    expect(await jsonOf(await fetch(`${url}/items`))).toEqual({ limit: 100, enabled_only: true });
  });

  it('refuses out-of-range and mistyped query values with 422 naming the parameter', async () => {
    const response = await fetch(`${url}/items?limit=501`);
    expect(response.status).toBe(422);
    expect((await jsonOf<Problem>(response)).errors).toEqual([{ location: 'query/limit', message: 'must be <= 500' }]);
    expect((await fetch(`${url}/items?limit=abc`)).status).toBe(422);
  });

  it('reads a scalar query parameter as one value, commas included', async () => {
    expect(await jsonOf(await fetch(`${url}/search?q=a,b&page=2`))).toEqual({ q: 'a,b', page: 2 });
  });

  it('answers a response documented without content (a redirect) with no body, and refuses one with a body', async () => {
    const response = await fetch(`${url}/go`, { redirect: 'manual' });
    expect(response.status).toBe(302);
    expect(response.headers.get('location')).toBe('https://example.com/');
    expect(await response.text()).toBe('');
    expect((await fetch(`${url}/go?with_body=true`, { redirect: 'manual' })).status).toBe(500);
  });

  it('turns a security handler failure into its error', async () => {
    const response = await fetch(`${url}/private`);
    expect(response.status).toBe(401);
    expect(await jsonOf(response)).toMatchObject({ code: 'UNAUTHENTICATED' });
  });

  it('takes a route’s body limit and error format from the document', async () => {
    const post = (path: string, body: string, headers: Record<string, string> = {}) =>
      fetch(`${url}${path}`, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
    expect(await jsonOf(await post('/echo', '{"a":1}'))).toEqual({ a: 1 });
    const tooLarge = await post('/echo', JSON.stringify({ a: 'x'.repeat(100) }));
    expect(tooLarge.status).toBe(413);
    expect(await jsonOf(tooLarge)).toEqual({
      error: { message: 'The request body is larger than 64 bytes.', type: 'invalid_request_error', code: 'request_too_large', param: null },
    });
    // A 405 on that path answers in its operations' format too.
    expect(await jsonOf(await fetch(`${url}/echo`))).toMatchObject({ error: { code: 'method_not_allowed' } });
    expect(await jsonOf(await fetch(`${url}/nowhere`))).toMatchObject({ code: 'NOT_FOUND' });
  });

  it('exempts only an x-csrf-exempt operation from the Origin check, and keeps its raw body for the signature', async () => {
    const headers = { 'content-type': 'application/json', origin: 'https://evil.example' };
    const hook = await fetch(`${url}/hook`, { method: 'POST', body: '{"id": 1}', headers });
    expect(await jsonOf(hook)).toEqual({ raw: '{"id": 1}' });
    const echo = await fetch(`${url}/echo`, { method: 'POST', body: '{}', headers });
    expect(echo.status).toBe(403);
    expect(await jsonOf(echo)).toMatchObject({ error: { code: 'csrf_failed' } });
  });

  it('reads no body on a route that documents none, nor on a path no route matches', async () => {
    const malformed = { method: 'POST', body: '{"not json', headers: { 'content-type': 'application/json' } };
    expect(await jsonOf(await fetch(`${url}/ping`, malformed))).toEqual({ read: false });
    expect((await fetch(`${url}/nowhere`, malformed)).status).toBe(404);
  });

  it('sends Deprecation (RFC 9745) and Sunset (RFC 8594) on every answer of a deprecated operation, and on no other', async () => {
    const answer = await fetch(`${url}/ping`, { method: 'POST' });
    expect([answer.status, answer.headers.get('deprecation'), answer.headers.get('sunset')]).toEqual([200, '@1793491200', 'Thu, 01 Jul 2027 00:00:00 GMT']);
    const refused = await fetch(`${url}/ping`, { method: 'POST', body: '{"not json', headers: { 'content-type': 'application/json', origin: 'https://evil.example' } });
    expect(refused.status).toBe(403);
    expect(refused.headers.get('deprecation')).toBe('@1793491200');
    expect((await fetch(`${url}/items`)).headers.get('deprecation')).toBeNull();
  });

  it('answers 500 without details when a handler breaks the contract', async () => {
    expect(await jsonOf(await fetch(`${url}/items/12`))).toEqual({ id: 12 });
    const response = await fetch(`${url}/items/13`);
    expect(response.status).toBe(500);
    const body = await jsonOf<Problem>(response);
    expect(body).toMatchObject({ code: 'INTERNAL_ERROR' });
    expect(JSON.stringify(body)).not.toContain('thirteen');
  });
});

describe('handler registration', () => {
  const real = loadOpenApiDocument();

  it('has a handler for every operation of the document', () => {
    const documented = Object.values(real.paths ?? {}).flatMap((item) =>
      Object.values(item ?? {}).flatMap((operation) =>
        operation && typeof operation === 'object' && 'operationId' in operation ? [operation.operationId as string] : [],
      ),
    );
    const registered = Object.keys(buildHandlers(offlineContainer()));
    expect(registered.sort()).toEqual(documented.sort());
  });

  it('refuses to start when an operation has no handler', async () => {
    const { getHealth: _, ...incomplete } = buildHandlers(offlineContainer());
    await expect(
      createApp({
        logger: createLogger('silent'),
        document: real,
        handlers: incomplete as Handlers,
        security: securityHandlers(offlineContainer()),
        allowedOrigins: [],
        trustProxy: false,
        validateResponses: true,
      }),
    ).rejects.toThrow(/Missing: getHealth/);
  });

  it('refuses to start when an operation that accepts the session has no role', async () => {
    const responses = { 200: { description: 'ok', content: { 'application/json': { schema: { type: 'object' } } } } };
    const extra = { get: { operationId: 'getExtra', security: [{ SessionCookie: [] }], 'x-error-format': 'problem', responses } };
    const withExtra = { ...real, paths: { ...real.paths, '/v1/extra': extra } } as unknown as Document;
    await expect(
      createApp({
        logger: createLogger('silent'),
        document: withExtra,
        handlers: { ...buildHandlers(offlineContainer()), getExtra: () => ({ status: 200, body: {} }) } as unknown as Handlers,
        security: securityHandlers(offlineContainer()),
        allowedOrigins: [],
        trustProxy: false,
        validateResponses: true,
      }),
    ).rejects.toThrow(/getExtra accepts the session cookie but its x-required-role is undefined/);
  });
});

describe('response validation (openapi-backend postResponseHandler)', () => {
  async function serve(validateResponses: boolean, lines: string[]) {
    const app = await createApp({
      logger: pino({ level: 'info' }, { write: (line: string) => void lines.push(line) }),
      document,
      handlers,
      security: { SessionCookie: () => undefined, CsrfToken: () => undefined, ApiKeyBearer: () => undefined },
      allowedOrigins: [],
      trustProxy: false,
      validateResponses,
    });
    const server = await listen(app, 0, '127.0.0.1');
    const address = server.address();
    return { url: `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`, close: () => closeServer(server, 1_000) };
  }

  it('logs a response that breaks the contract, naming the operation and status', async () => {
    const lines: string[] = [];
    const app = await serve(true, lines);
    try {
      expect((await fetch(`${app.url}/items/13`)).status).toBe(500);
      const logged = lines.map((line) => JSON.parse(line) as Record<string, unknown>).find((line) => line.msg === 'response does not match the OpenAPI document');
      expect(logged).toMatchObject({ level: 50, operationId: 'getItem', status: 200 });
    } finally {
      await app.close();
    }
  });

  it('sends replies unchecked when response validation is off', async () => {
    const app = await serve(false, []);
    try {
      const response = await fetch(`${app.url}/items/13`);
      expect(response.status).toBe(200);
      expect(await jsonOf(response)).toEqual({ id: 'thirteen' });
      expect(await (await fetch(`${app.url}/go?with_body=true`, { redirect: 'manual' })).text()).toBe('{"to":"x"}');
    } finally {
      await app.close();
    }
  });
});
