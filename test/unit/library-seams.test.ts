import { createRequire } from 'node:module';
import express from 'express';
import { OpenAPIBackend, type Document } from 'openapi-backend';
import { describe, expect, it } from 'vitest';

/**
 * What the two planes use of their libraries beyond their routers, pinned: the inference gateway
 * calls openapi-backend's compiled request validators itself (`validator.getRequestValidatorsForOperation`,
 * with the request parts openapi-backend hands them), and both planes' requests and responses are
 * made by the server with Express's prototypes (`app.request`, `app.response`: server.ts,
 * `messageClassesOf`). The management API uses both libraries as published (no method of theirs is
 * replaced). An upgrade of either fails here first: check these still hold, then move the versions.
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

  it('express: the request and response prototypes are the app\'s own objects, made once', () => {
    const app = express();
    expect(Object.getPrototypeOf(app.request)).toBe(express.request);
    expect(Object.getPrototypeOf(app.response)).toBe(express.response);
    expect(app.request.app).toBe(app);
  });
});
