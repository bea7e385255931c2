import { createRequire } from 'node:module';
import { createServer } from 'node:http';
import express from 'express';
import { OpenAPIBackend, type Document } from 'openapi-backend';
import { describe, expect, it } from 'vitest';

/**
 * The library internals the request path relies on for speed, pinned: the binding replaces
 * openapi-backend's router lookups (`fixedRouting`: `router.matchOperation`, `router.getOperations`)
 * and calls its compiled request validators directly (`directDispatch`:
 * `validator.getRequestValidatorsForOperation`), and the pipeline replaces Express's router
 * (`answerWithPipeline`: `app.handle`, what `app(req, res)` calls). An upgrade of either library
 * fails here first: check these seams still hold, then move the versions below.
 */
const require = createRequire(import.meta.url);
const versionOf = (name: string) => (require(`${name}/package.json`) as { version: string }).version;

const DOCUMENT: Document = {
  openapi: '3.0.3',
  info: { title: 'seams', version: '1' },
  paths: {
    '/things/{id}': {
      post: {
        operationId: 'makeThing',
        parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string' } }],
        requestBody: { required: true, content: { 'application/json': { schema: { type: 'object', required: ['name'], properties: { name: { type: 'string' } }, additionalProperties: false } } } },
        responses: { '200': { description: 'made' } },
      },
    },
  },
};

describe('the library seams the request path relies on', () => {
  it('runs on the versions these seams were checked against', () => {
    expect(versionOf('openapi-backend')).toBe('5.21.2');
    expect(versionOf('express')).toBe('5.3.0');
  });

  it('openapi-backend: handleRequest routes through router.matchOperation, which the binding replaces', async () => {
    const api = new OpenAPIBackend({ definition: DOCUMENT, quick: true, validate: false });
    api.register('makeThing', () => 'handled');
    await api.init();
    const library = api.router;
    const operations = library.getOperations();
    expect(operations.map((operation) => operation.operationId)).toEqual(['makeThing']);
    const asked: string[] = [];
    const original = library.matchOperation.bind(library);
    library.matchOperation = ((request: { path: string }, strict?: boolean) => {
      asked.push(request.path);
      return original(request as Parameters<typeof original>[0], strict as true);
    }) as typeof library.matchOperation;
    expect(await api.handleRequest({ method: 'POST', path: '/things/1', headers: {}, body: { name: 'x' } })).toBe('handled');
    expect(asked).toEqual(['/things/1']);
  });

  it('openapi-backend: the compiled request validators take the request parts the binding hands them', async () => {
    const api = new OpenAPIBackend({ definition: DOCUMENT, quick: true });
    await api.init();
    const validators = api.validator.getRequestValidatorsForOperation('makeThing');
    expect(validators.length).toBeGreaterThan(0);
    const check = (requestBody: unknown) => validators.every((validate) => validate({ path: { id: '1' }, query: {}, header: {}, cookie: {}, requestBody }));
    expect(check({ name: 'x' })).toBe(true);
    expect(check({ name: 'x', unknown: 1 })).toBe(false);
    expect(check(undefined)).toBe(false);
  });

  it('express: app(req, res) calls app.handle, which the pipeline replaces', async () => {
    const app = express();
    app.get('/', (_req, res) => void res.send('router'));
    (app as unknown as { handle: (req: unknown, res: { end(body: string): void }) => void }).handle = (_req, res) => res.end('pipeline');
    const server = createServer(app);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const address = server.address() as { port: number };
      expect(await (await fetch(`http://127.0.0.1:${address.port}/`)).text()).toBe('pipeline');
    } finally {
      server.close();
    }
  });
});
