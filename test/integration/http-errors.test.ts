import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { registeredUser } from '../factories/accounts.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser } from '../helpers/browser.ts';
import { contractFetch } from '../helpers/contract.ts';
import { jsonOf, unchecked, type Problem } from '../helpers/http.ts';

type StripeEvent = components['schemas']['StripeEvent'];

/** The error contract every route shares: shapes, statuses and request ids. */
describe('HTTP error handling', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(() => app.close());

  const api = (origin?: string) => {
    const browser = new Browser(app.url);
    if (origin) browser.origin = origin;
    return browser.api;
  };

  /** `body`: the typed client's parsed error; read from the response for a raw request. */
  async function expectProblem(response: Response, status: number, code: string, body?: unknown) {
    expect(response.status).toBe(status);
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    const problem = (body ?? (await jsonOf(response))) as Problem;
    expect(problem).toMatchObject({ status, code, title: expect.any(String), detail: expect.any(String) });
    expect(problem.type).toMatch(/^https:\/\//);
    expect(problem.request_id).toBe(response.headers.get('x-request-id'));
    return problem;
  }

  it('answers an unknown path with 404 NOT_FOUND (under /v1/, OpenAI\u2019s unknown_url instead)', async () => {
    // No operation of the document has these paths: plain fetch.
    await expectProblem(await fetch(`${app.url}/api/v1/nothing-here`), 404, 'NOT_FOUND');
    const openAiPath = await fetch(`${app.url}/v1/nothing-here`);
    expect(openAiPath.status).toBe(404);
    expect(await jsonOf(openAiPath)).toMatchObject({ error: { type: 'invalid_request_error', code: 'unknown_url', param: null } });
  });

  it('answers a known path with the wrong method with 405 and an Allow header', async () => {
    // PUT is no operation of this path: plain fetch.
    const response = await fetch(`${app.url}/api/v1/model-deployments/0192f1c6-2b9e-7c4e-9b1a-5d0c8e6f7a21`, { method: 'PUT' });
    await expectProblem(response, 405, 'METHOD_NOT_ALLOWED');
    expect(response.headers.get('allow')).toBe('GET, DELETE, PATCH');
  });

  it('answers malformed JSON with 400 MALFORMED_REQUEST', async () => {
    // A body that is not JSON, which the typed client cannot send.
    const response = await contractFetch(app.url)(`${app.url}/v1/user/signin`, { method: 'POST', body: '{"email": ', headers: { 'content-type': 'application/json' } });
    await expectProblem(response, 400, 'MALFORMED_REQUEST');
  });

  describe('JSON bodies as every client may send them', () => {
    const unknownAccount = JSON.stringify({ email: 'nobody@example.com', password: 'not-the-password' });
    const signIn = (body: NonNullable<RequestInit['body']>, headers: Record<string, string> = {}) =>
      contractFetch(app.url)(`${app.url}/v1/user/signin`, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers }, duplex: 'half' } as RequestInit);

    it('reads a plain body, with a byte-order mark, with a charset, gzipped or chunked alike', async () => {
      // The sign-in itself answers (unknown account), not the body's reader.
      const expected = { status: 401, code: 'INVALID_CREDENTIALS' };
      const outcome = async (response: Response) => ({ status: response.status, code: ((await jsonOf(response)) as Problem).code });
      expect(await outcome(await signIn(unknownAccount))).toEqual(expected);
      const gzipped = await new Response(new Blob([unknownAccount]).stream().pipeThrough(new CompressionStream('gzip'))).arrayBuffer();
      const chunked = new Blob([unknownAccount]).stream();
      const variants = [
        await signIn(`\uFEFF${unknownAccount}`),
        await signIn(`  \n${unknownAccount}`, { 'content-type': 'application/json; charset=UTF-8' }),
        await signIn(gzipped, { 'content-encoding': 'gzip' }),
        await signIn(chunked),
      ];
      for (const response of variants) expect(await outcome(response)).toEqual(expected);
    });

    it.each([
      ['a bare string', '"ada@example.com"'],
      ['a number', '42'],
      ['nothing but spaces', '   '],
      ['a truncated object', '{"email": "a@example.com", "password": '],
    ])('answers %s with 400 MALFORMED_REQUEST', async (_what, body) => {
      await expectProblem(await signIn(body), 400, 'MALFORMED_REQUEST');
    });

    it('answers a charset other than UTF-8 with 400 MALFORMED_REQUEST', async () => {
      await expectProblem(await signIn(unknownAccount, { 'content-type': 'application/json; charset=latin1' }), 400, 'MALFORMED_REQUEST');
    });
  });

  it('answers a body over 1 MiB with 413 PAYLOAD_TOO_LARGE', async () => {
    const { error, response } = await api().POST('/v1/user/signin', { body: { email: 'a@example.com', password: 'x'.repeat(1_100_000) } });
    const problem = await expectProblem(response, 413, 'PAYLOAD_TOO_LARGE', error);
    expect(problem.detail).toBe('The request body is larger than 1 MiB.');
  });

  it('answers an invalid body with 422 VALIDATION_FAILED listing each problem', async () => {
    const { error, response } = await api().POST('/v1/user/signin', { body: unchecked({ email: 42 }) });
    const problem = await expectProblem(response, 422, 'VALIDATION_FAILED', error);
    expect(problem.errors).toEqual(
      expect.arrayContaining([
        { location: 'body/password', message: '`password` is required' },
        { location: 'body/email', message: expect.stringMatching(/string/) },
      ]),
    );
  });

  it('answers a query parameter with a NUL character with 422, before it reaches a query (found by the fuzzer)', async () => {
    const owner = await registeredUser(app);
    const response = await owner.browser.fetch('/api/v1/deployable-models?provider=a%00b');
    const problem = await expectProblem(response, 422, 'VALIDATION_FAILED');
    expect(problem.errors).toEqual([{ location: 'query/provider', message: 'must not contain NUL characters (\\u0000)' }]);
  });

  it('rejects unknown fields of a strict body with 422', async () => {
    const { error, response } = await api().POST('/v1/auth/password-reset/request', { body: unchecked({ email: 'ada@example.com', admin: true }) });
    const problem = await expectProblem(response, 422, 'VALIDATION_FAILED', error);
    expect(problem.errors).toContainEqual({ location: 'body/admin', message: 'unknown field `admin` is not allowed' });
  });

  const event: StripeEvent = { id: 'evt_1', object: 'event', type: 'invoice.paid', created: 1795910405, data: { object: {} }, livemode: false };
  const signature = { header: { 'Stripe-Signature': 't=1,v1=abc' } };

  it('answers an operation that is not built yet with 501 NOT_IMPLEMENTED', async () => {
    const { error, response } = await api().POST('/v1/billing/webhook', { body: event, params: signature });
    await expectProblem(response, 501, 'NOT_IMPLEMENTED', error);
  });

  it('lets the webhook (x-csrf-exempt, verified by signature) past the Origin check that refuses other writes from that origin', async () => {
    const foreign = api('https://evil.example');
    const hook = await foreign.POST('/v1/billing/webhook', { body: event, params: signature });
    await expectProblem(hook.response, 501, 'NOT_IMPLEMENTED', hook.error);
    const signIn = await foreign.POST('/v1/user/signin', { body: { email: 'a@example.com', password: 'x' }, headers: signature.header });
    await expectProblem(signIn.response, 403, 'CSRF_FAILED', signIn.error);
  });

  it('answers a session route without a session with 401 UNAUTHENTICATED', async () => {
    const { error, response } = await api().GET('/api/v1/model-deployments');
    await expectProblem(response, 401, 'UNAUTHENTICATED', error);
  });

  it('gives every response a request id and keeps a well-formed inbound one', async () => {
    const health = (headers: Record<string, string> = {}) => api().GET('/healthz', { headers });
    expect((await health()).response.headers.get('x-request-id')).toMatch(/^req_[0-9a-f]{32}$/);
    expect((await health({ 'x-request-id': 'trace-1234-abcd' })).response.headers.get('x-request-id')).toBe('trace-1234-abcd');
    expect((await health({ 'x-request-id': 'bad id with spaces' })).response.headers.get('x-request-id')).toMatch(/^req_/);
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
    // A body that is not JSON, which the typed client cannot send: the browser's own fetch (cookies and CSRF header).
    const response = await browser.fetch('/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model": ' });
    expect(response.status).toBe(400);
    expect(await jsonOf(response)).toEqual({
      error: { message: 'The request body is not valid JSON.', type: 'invalid_request_error', code: 'invalid_json', param: null },
    });
  });

  it('authenticate before reading the body: a bad key answers 401 whatever the body', async () => {
    // A body that is not JSON, which the typed client cannot send (the answer is still checked against the document).
    const response = await contractFetch(app.url)(`${app.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer svc-sk-x' },
      body: '{"model": ',
    });
    expect(response.status).toBe(401);
    expect(await jsonOf(response)).toMatchObject({ error: { type: 'authentication_error', code: 'invalid_api_key' } });
  });

  it('answer an unknown method in the same shape, as OpenAI does: 404 unknown_url', async () => {
    // GET is no operation of this path: plain fetch.
    const response = await fetch(`${app.url}/v1/embeddings`);
    expect(response.status).toBe(404);
    expect(await jsonOf(response)).toEqual({
      error: { message: 'Unknown request URL: GET /v1/embeddings. Please check the URL for typos, or see the API reference at /docs.', type: 'invalid_request_error', code: 'unknown_url', param: null },
    });
  });
});
