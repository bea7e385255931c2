import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registeredUser } from '../factories/accounts.ts';
import { jsonOf, type Problem } from '../helpers/http.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';

/** The error contract every route shares: shapes, statuses and request ids. */
describe('HTTP error handling', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(() => app.close());

  const post = (path: string, body: string, headers: Record<string, string> = {}) =>
    fetch(`${app.url}${path}`, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });

  async function expectProblem(response: Response, status: number, code: string) {
    expect(response.status).toBe(status);
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    const body = await jsonOf<Problem>(response);
    expect(body).toMatchObject({ status, code, title: expect.any(String), detail: expect.any(String) });
    expect(body.type).toMatch(/^https:\/\//);
    expect(body.request_id).toBe(response.headers.get('x-request-id'));
    return body;
  }

  it('answers an unknown path with 404 NOT_FOUND', async () => {
    await expectProblem(await fetch(`${app.url}/v1/nothing-here`), 404, 'NOT_FOUND');
  });

  it('answers a known path with the wrong method with 405 and an Allow header', async () => {
    const response = await fetch(`${app.url}/api/v1/model-deployments/0192f1c6-2b9e-7c4e-9b1a-5d0c8e6f7a21`, { method: 'PUT' });
    await expectProblem(response, 405, 'METHOD_NOT_ALLOWED');
    expect(response.headers.get('allow')).toBe('GET, DELETE');
  });

  it('answers malformed JSON with 400 MALFORMED_REQUEST', async () => {
    await expectProblem(await post('/v1/user/signin', '{"email": '), 400, 'MALFORMED_REQUEST');
  });

  it('answers a body over 1 MiB with 413 PAYLOAD_TOO_LARGE', async () => {
    const big = JSON.stringify({ email: 'a@example.com', password: 'x'.repeat(1_100_000) });
    const body = await expectProblem(await post('/v1/user/signin', big), 413, 'PAYLOAD_TOO_LARGE');
    expect(body.detail).toBe('The request body is larger than 1 MiB.');
  });

  it('answers an invalid body with 422 VALIDATION_FAILED listing each problem', async () => {
    const body = await expectProblem(await post('/v1/user/signin', JSON.stringify({ email: 42 })), 422, 'VALIDATION_FAILED');
    expect(body.errors).toEqual(
      expect.arrayContaining([
        { location: 'body/password', message: '`password` is required' },
        { location: 'body/email', message: expect.stringMatching(/string/) },
      ]),
    );
  });

  it('rejects unknown fields of a strict body with 422', async () => {
    const body = await expectProblem(
      await post('/v1/auth/password-reset/request', JSON.stringify({ email: 'ada@example.com', admin: true })),
      422,
      'VALIDATION_FAILED',
    );
    expect(body.errors).toContainEqual({ location: 'body/admin', message: 'unknown field `admin` is not allowed' });
  });

  it('answers an operation that is not built yet with 501 NOT_IMPLEMENTED', async () => {
    const event = { id: 'evt_1', object: 'event', type: 'invoice.paid', created: 1795910405, data: { object: {} }, livemode: false };
    await expectProblem(await post('/v1/billing/webhook', JSON.stringify(event), { 'stripe-signature': 't=1,v1=abc' }), 501, 'NOT_IMPLEMENTED');
  });

  it('lets the webhook (x-csrf-exempt, verified by signature) past the Origin check that refuses other writes from that origin', async () => {
    const event = { id: 'evt_1', object: 'event', type: 'invoice.paid', created: 1795910405, data: { object: {} }, livemode: false };
    const foreign = { origin: 'https://evil.example', 'stripe-signature': 't=1,v1=abc' };
    await expectProblem(await post('/v1/billing/webhook', JSON.stringify(event), foreign), 501, 'NOT_IMPLEMENTED');
    await expectProblem(await post('/v1/user/signin', JSON.stringify({ email: 'a@example.com', password: 'x' }), foreign), 403, 'CSRF_FAILED');
  });

  it('answers a session route without a session with 401 UNAUTHENTICATED', async () => {
    await expectProblem(await fetch(`${app.url}/api/v1/model-deployments`), 401, 'UNAUTHENTICATED');
  });

  it('gives every response a request id and keeps a well-formed inbound one', async () => {
    const generated = await fetch(`${app.url}/healthz`);
    expect(generated.headers.get('x-request-id')).toMatch(/^req_[0-9a-f]{32}$/);
    const kept = await fetch(`${app.url}/healthz`, { headers: { 'x-request-id': 'trace-1234-abcd' } });
    expect(kept.headers.get('x-request-id')).toBe('trace-1234-abcd');
    const replaced = await fetch(`${app.url}/healthz`, { headers: { 'x-request-id': 'bad id with spaces' } });
    expect(replaced.headers.get('x-request-id')).toMatch(/^req_/);
  });
});

describe('errors on inference routes', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(() => app.close());

  it('answer in the hosted-inference shape, with 400 for a body that is not JSON', async () => {
    const { browser } = await registeredUser(app);
    const response = await fetch(`${app.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        cookie: [...browser.cookies].map(([name, value]) => `${name}=${value}`).join('; '),
        'x-csrf-token': browser.cookies.get('csrf_token') ?? '',
      },
      body: '{"model": ',
    });
    expect(response.status).toBe(400);
    expect(await jsonOf(response)).toEqual({
      error: { message: 'The request body is not valid JSON.', type: 'invalid_request_error', code: 'invalid_json', param: null },
    });
  });

  it('authenticate before reading the body: a bad key answers 401 whatever the body', async () => {
    const response = await fetch(`${app.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer svc-sk-x' },
      body: '{"model": ',
    });
    expect(response.status).toBe(401);
    expect(await jsonOf(response)).toMatchObject({ error: { type: 'authentication_error', code: 'invalid_api_key' } });
  });

  it('answer an unknown method with 405 in the same shape', async () => {
    const response = await fetch(`${app.url}/v1/embeddings`);
    expect(response.status).toBe(405);
    expect(await jsonOf(response)).toMatchObject({ error: { type: 'invalid_request_error', code: 'method_not_allowed' } });
  });
});
