import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenOn, offlineContainer } from '../helpers/app.ts';

const API_POLICY = "default-src 'none';base-uri 'none';form-action 'none';frame-ancestors 'none'";

describe('security headers', () => {
  let app: { url: string; close(): Promise<void> };
  beforeAll(async () => {
    app = await listenOn(offlineContainer());
  });
  afterAll(() => app.close());

  it('grants no cross-origin access: no CORS header, to a simple request or a preflight', async () => {
    const simple = await fetch(`${app.url}/openapi.json`, { headers: { origin: 'https://evil.example' } });
    const preflight = await fetch(`${app.url}/v1/user/signin`, {
      method: 'OPTIONS',
      headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
    });
    for (const response of [simple, preflight]) {
      expect([...response.headers.keys()].filter((name) => name.startsWith('access-control-'))).toEqual([]);
    }
  });

  it.each([
    ['a JSON answer', '/openapi.json', 200],
    ['an error answer', '/v1/auth/session', 401],
    ['an unknown path', '/nothing-here', 404],
  ])('sends the hardening headers on %s', async (_what, path, status) => {
    const response = await fetch(`${app.url}${path}`);
    expect(response.status).toBe(status);
    expect(response.headers.get('content-security-policy')).toBe(API_POLICY);
    expect(response.headers.get('x-frame-options')).toBe('DENY');
    expect(response.headers.get('referrer-policy')).toBe('no-referrer');
    expect(response.headers.get('x-content-type-options')).toBe('nosniff');
    expect(response.headers.get('cross-origin-opener-policy')).toBe('same-origin');
    expect(response.headers.get('x-powered-by')).toBeNull();
  });

  it('sends no Strict-Transport-Security outside production (a development server is plain HTTP)', async () => {
    expect((await fetch(`${app.url}/openapi.json`)).headers.get('strict-transport-security')).toBeNull();
  });

  it.each(['/docs', '/redoc'])('gives %s a policy of its own: scripts only from this origin, no inline script, never framed', async (path) => {
    const response = await fetch(`${app.url}${path}`);
    expect(response.status).toBe(200);
    const policy = Object.fromEntries(
      (response.headers.get('content-security-policy') ?? '').split(';').map((d) => d.trim().split(/\s+/)).map(([name = '', ...values]) => [name, values]),
    );
    expect(policy['script-src']).toEqual(["'self'"]);
    expect(policy['default-src']).toEqual(["'none'"]);
    expect(policy['frame-ancestors']).toEqual(["'none'"]);
    expect(policy['connect-src']).toEqual(["'self'"]);
    expect(response.headers.get('x-frame-options')).toBe('DENY');
    const html = await response.text();
    expect(html.match(/<script(?![^>]*\bsrc=)[^>]*>/g)).toBeNull();
  });
});

describe('security headers in production', () => {
  it('sends Strict-Transport-Security for a year, subdomains included', async () => {
    const app = await listenOn(offlineContainer(), { hsts: true });
    try {
      const response = await fetch(`${app.url}/openapi.json`);
      expect(response.headers.get('strict-transport-security')).toBe('max-age=31536000; includeSubDomains');
    } finally {
      await app.close();
    }
  });
});
