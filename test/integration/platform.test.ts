import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPENAPI_PATH } from '../../src/openapi-document.ts';
import { listenOn, offlineContainer, startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser } from '../helpers/browser.ts';
import { freePort } from '../helpers/net.ts';

describe('platform routes', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(() => app.close());

  it('reports ok when the database answers', async () => {
    const { data, response } = await new Browser(app.url).api.GET('/healthz');
    expect(response.status).toBe(200);
    expect(data).toEqual({ status: 'ok' });
  });

  it('serves the generated OpenAPI document with its server at the origin it is read from', async () => {
    const { data, response } = await new Browser(app.url).api.GET('/openapi.json');
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    const published = JSON.parse(readFileSync(OPENAPI_PATH, 'utf8')) as Record<string, unknown>;
    expect(data).toEqual({ ...published, servers: [{ url: '/', description: expect.any(String) }] });
  });

  it.each([
    ['/docs', /\/docs\/assets\/swagger-ui-bundle\.js/],
    ['/redoc', /\/redoc\/assets\/redoc\.standalone\.js/],
  ] as const)('serves %s from installed assets with no external address', async (path, script) => {
    const { data: html = '', response } = await new Browser(app.url).api.GET(path, { parseAs: 'text' });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/html/);
    expect(html).toMatch(script);
    expect(html).not.toMatch(/(src|href)="(https?:)?\/\//);
    const texts = [html];
    for (const asset of html.matchAll(/(?:src|href)="(\/[^"]+)"/g)) {
      // The static assets are files, not operations of the document: plain fetch.
      const assetResponse = await fetch(`${app.url}${asset[1]}`);
      expect(assetResponse.status, asset[1]).toBe(200);
      texts.push(await assetResponse.text());
      expect(texts.at(-1)?.length).toBeGreaterThan(100);
    }
    // The page, or the start-up script it loads, reads this document.
    expect(texts.join('\n')).toContain('/openapi.json');
  });
});

describe('health without a database', () => {
  it('answers 503 SERVICE_UNAVAILABLE when Postgres does not answer', async () => {
    const closedPort = await freePort();
    const app = await listenOn(offlineContainer(`postgres://postgres@127.0.0.1:${closedPort}/nothing`));
    try {
      const { error, response } = await new Browser(app.url).api.GET('/healthz');
      expect(response.status).toBe(503);
      expect(error).toMatchObject({ status: 503, code: 'SERVICE_UNAVAILABLE' });
      expect(error?.request_id).toBe(response.headers.get('x-request-id'));
    } finally {
      await app.close();
    }
  });
});
