import createClient from 'openapi-fetch';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { paths } from '../../generated/api.d.ts';
import { Browser } from '../helpers/browser.ts';
import { startPrism, type PrismMock } from '../helpers/prism.ts';

/**
 * What the frontend and SDK teams do: run Prism's mock of generated/openapi.json and drive it with a
 * client generated from generated/api.d.ts. The mock must start, serve the examples, and enforce
 * the contract's security and strict bodies.
 */
describe('contract: Prism mock of the OpenAPI document', () => {
  let prism: PrismMock;
  let baseUrl: string;

  beforeAll(async () => {
    prism = await startPrism();
    baseUrl = prism.url;
  }, 90_000);

  afterAll(() => {
    prism?.close();
  });

  const client = () => createClient<paths>({ baseUrl });
  const session = { Cookie: 'session=contract-test' };

  it('serves the health example', async () => {
    const { data, response } = await client().GET('/healthz');
    expect(response.status).toBe(200);
    expect(data).toEqual({ status: 'ok' });
  });

  it('serves a typed page of deployments to a signed-in caller', async () => {
    const { data, response } = await client().GET('/api/v1/model-deployments', { params: { query: { limit: 10 } }, headers: session });
    expect(response.status).toBe(200);
    expect(data?.items[0]).toMatchObject({ model_name: 'qwen2.5-instruct', status: 'requested' });
    expect(data).toMatchObject({ total: 1, limit: 100, offset: 0 });
  });

  it('answers 401 without the session cookie', async () => {
    const { response } = await client().GET('/api/v1/model-deployments');
    expect(response.status).toBe(401);
  });

  it('creates a deployment with 201 and status requested', async () => {
    const { data, response } = await client().POST('/api/v1/model-deployments', {
      body: { model_name: 'qwen2.5-instruct', model_size_in_billions: '7' },
      headers: { ...session, 'X-CSRF-Token': 'token' },
    });
    expect(response.status).toBe(201);
    expect(data?.status).toBe('requested');
  });

  it('rejects an unknown field of a strict body with 422', async () => {
    const response = await fetch(`${baseUrl}/api/v1/model-deployments`, {
      method: 'POST',
      headers: { ...session, 'X-CSRF-Token': 'token', 'content-type': 'application/json' },
      body: JSON.stringify({ model_name: 'qwen2.5-instruct', gpu: 'h100' }),
    });
    expect(response.status).toBe(422);
  });

  it('refuses a state-changing call with the session cookie but without the CSRF token', async () => {
    const { response } = await client().POST('/api/v1/model-deployments', { body: { model_name: 'qwen2.5-instruct' }, headers: session });
    expect(response.status).toBe(401);
  });

  it('signs in and returns the session example', async () => {
    const { data, response } = await client().POST('/v1/user/signin', { body: { email: 'ada@example.com', password: 'correct horse battery' } });
    expect(response.status).toBe(200);
    expect(data?.authenticated).toBe(true);
    expect(data?.user.role.name).toBe('super_admin');
  });

  it('keeps the session cookies a registration sets, and signs the following calls in with them until sign-out', async () => {
    // openapi-fetch over a fetch that keeps cookies and echoes csrf_token in X-CSRF-Token, as a browser app does.
    const browser = new Browser(baseUrl);
    const registered = await browser.api.POST('/v1/user/register', { body: { email: 'ada@example.com', password: 'correct horse battery', organization: 'Analytical Engines Ltd' } });
    expect(registered.response.status).toBe(201);
    expect([...browser.cookies.keys()]).toEqual(['session', 'csrf_token']);
    const session = await browser.api.GET('/v1/auth/session');
    expect(session.response.status).toBe(200);
    expect(session.data?.authenticated).toBe(true);
    // A state-changing call needs the CSRF header, which the browser takes from the csrf_token cookie.
    const created = await browser.api.POST('/api/v1/model-deployments', { body: { model_name: 'qwen2.5-instruct', model_size_in_billions: '7' } });
    expect(created.response.status).toBe(201);
    const signedOut = await browser.api.POST('/v1/user/logout');
    expect(signedOut.response.status).toBe(200);
    expect([...browser.cookies.keys()]).toEqual([]);
    expect((await browser.api.GET('/v1/auth/session')).response.status).toBe(401);
  });

  it('answers a chat completion to a bearer API key', async () => {
    const { data, response } = await client().POST('/v1/chat/completions', {
      body: { model: 'qwen2.5-instruct', messages: [{ role: 'user', content: 'What is the capital of France?' }] },
      headers: { Authorization: 'Bearer svc-sk-7Kq2mZ9xW4pL8vN3rT6yB1cD5fG0hJ2k9Qw3Zx' },
    });
    expect(response.status).toBe(200);
    expect(data).toMatchObject({ object: 'chat.completion', usage: { total_tokens: expect.any(Number) } });
  });

  it('previews an invitation with no sign-in', async () => {
    const { data, response } = await client().GET('/v1/invitations/by-token/{token}', { params: { path: { token: 'inv_3q9Zx7Lm2Vb8Nc4Rt6Yp1Kd5' } } });
    expect(response.status).toBe(200);
    expect(data).toMatchObject({ status: expect.any(String), invitee_email: expect.stringContaining('@') });
  });
});
