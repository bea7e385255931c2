import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PASSWORD, registeredUser, uniqueEmail } from '../factories/accounts.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser, parseSetCookie } from '../helpers/browser.ts';
import { startPrism, type PrismMock } from '../helpers/prism.ts';

/**
 * A client written against the Prism mock must keep working against the server: where the mock
 * answers with the document's examples, the server answers the same (texts, cookie names and
 * attributes), apart from what differs per request (ids, tokens, dates).
 */
describe('contract: the mock answers as the server does', () => {
  let prism: PrismMock;
  let app: TestApp;

  beforeAll(async () => {
    [prism, app] = await Promise.all([startPrism(), startTestApp()]);
  }, 90_000);

  afterAll(async () => {
    prism?.close();
    await app?.close();
  });

  it('answers a wrong password with the same 401 Problem, detail included', async () => {
    const { email } = await registeredUser(app);
    const body = { email, password: `not ${PASSWORD}` };
    const server = await new Browser(app.url).api.POST('/v1/user/signin', { body });
    const mock = await new Browser(prism.url).api.POST('/v1/user/signin', { body, headers: { Prefer: 'code=401' } });
    expect([server.response.status, mock.response.status]).toEqual([401, 401]);
    const withoutRequestId = (problem: object | undefined) => ({ ...problem, request_id: undefined });
    expect(withoutRequestId(mock.error)).toEqual(withoutRequestId(server.error));
  });

  it('invents, when asked for dynamic answers, only an organization the server could give', async () => {
    const { api } = await registeredUser(app);
    const { data: server } = await api.GET('/v1/organization');
    const { data: mock, response } = await new Browser(prism.url).api.GET('/v1/organization', { headers: { Cookie: 'session=mock', Prefer: 'dynamic=true' } });
    expect(response.status).toBe(200);
    expect(mock?.id).toBeGreaterThanOrEqual(1);
    expect(mock?.status).toBe(server?.status);
    for (const slug of [server?.slug, mock?.slug]) expect(slug).toMatch(/^[a-z0-9]+(-[a-z0-9]+)*$/);
  });

  it('sets and clears the same session cookies, with the same attributes', async () => {
    const cookies = (response: Response) =>
      response.headers.getSetCookie().map((header) => {
        const { name, value, attributes } = parseSetCookie(header);
        return { name, value: value ? 'set' : 'empty', attributes: Object.keys(attributes).sort() };
      });
    const registerThenSignOut = async (base: string) => {
      const browser = new Browser(base);
      const registered = await browser.api.POST('/v1/user/register', { body: { email: uniqueEmail('mock'), password: PASSWORD, organization: 'Mock Ltd' } });
      const signedOut = await browser.api.POST('/v1/user/logout');
      expect([registered.response.status, signedOut.response.status]).toEqual([201, 200]);
      return { registered: cookies(registered.response), signedOut: cookies(signedOut.response) };
    };
    const [server, mock] = [await registerThenSignOut(app.url), await registerThenSignOut(prism.url)];
    expect(server.registered.map((cookie) => cookie.name)).toEqual(['session', 'csrf_token']);
    expect(mock).toEqual(server);
  });
});
