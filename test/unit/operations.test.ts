import { OpenAPIRouter, type Document } from 'openapi-backend';
import { describe, expect, it } from 'vitest';
import { OperationRouter, pathParameters, readOperationRules } from '../../src/http/operations.ts';
import { loadOpenApiDocument } from '../../src/openapi-document.ts';

const real = loadOpenApiDocument();
const ok = { 200: { description: 'ok' } };
const body = { required: true, content: { 'application/json': { schema: { type: 'object' } } } };

/** A document of one path with these operations, and the session cookie as its default security. */
const documentWith = (operations: Record<string, object>, path = '/things'): Document =>
  ({
    openapi: '3.0.0',
    info: { title: 'rules', version: '1' },
    security: [{ SessionCookie: [] }],
    paths: { [path]: operations },
    components: { securitySchemes: { SessionCookie: { type: 'apiKey', in: 'cookie', name: 'session' } } },
  }) as unknown as Document;

describe('the route rules of the document', () => {
  const rules = readOperationRules(real);

  it('reads each operation’s role, error format, body limit and CSRF exemption from its x- extensions', () => {
    expect(rules.get('createChatCompletion')).toMatchObject({
      route: 'POST /v1/chat/completions',
      acceptsApiKey: true,
      requiredRole: 'member',
      errorFormat: 'inference',
      bodyLimit: 10 * 1024 * 1024,
      jsonBody: true,
      csrfExempt: false,
    });
    expect(rules.get('createTranscription')).toMatchObject({ errorFormat: 'inference', bodyLimit: 25 * 1024 * 1024, jsonBody: false });
    expect(rules.get('listDeployments')).toMatchObject({ requiredRole: 'viewer', errorFormat: 'problem', bodyLimit: undefined, acceptsApiKey: false });
    expect(rules.get('signIn')).toMatchObject({ requiredRole: undefined, errorFormat: 'problem', bodyLimit: 1024 * 1024 });
    expect(rules.get('handleBillingWebhook')).toMatchObject({ csrfExempt: true, requiredRole: undefined });
    expect([...rules.values()].filter((operation) => operation.csrfExempt).map((operation) => operation.operationId)).toEqual(['handleBillingEventNotification', 'handleBillingWebhook']);
  });

  it('refuses a session operation without a role, or with one that is not a role', () => {
    expect(() => readOperationRules(documentWith({ get: { operationId: 'getThing', 'x-error-format': 'problem', responses: ok } }))).toThrow(
      /getThing accepts the session cookie but its x-required-role is undefined/,
    );
    expect(() =>
      readOperationRules(documentWith({ get: { operationId: 'getThing', 'x-required-role': 'owner', 'x-error-format': 'problem', responses: ok } })),
    ).toThrow(/getThing accepts the session cookie but its x-required-role is "owner"/);
  });

  it('refuses an operation without an error format, and a role on an operation that takes no session', () => {
    const publicOperation = { operationId: 'getThing', security: [{}], 'x-required-role': 'viewer', responses: ok };
    expect(() => readOperationRules(documentWith({ get: publicOperation }))).toThrow(/getThing takes no session but has an x-required-role.*getThing has the x-error-format undefined/);
  });

  it('refuses a request body without a limit, and a limit without a body', () => {
    const withBody = { operationId: 'createThing', 'x-required-role': 'member', 'x-error-format': 'problem', requestBody: body, responses: ok };
    expect(() => readOperationRules(documentWith({ post: withBody }))).toThrow(/createThing has a request body but no x-body-limit/);
    const limitOnly = { operationId: 'getThing', 'x-required-role': 'viewer', 'x-error-format': 'problem', 'x-body-limit': 1024, responses: ok };
    expect(() => readOperationRules(documentWith({ get: limitOnly }))).toThrow(/getThing has an x-body-limit but no request body/);
  });

  it('refuses a CSRF exemption on an operation that accepts the session cookie', () => {
    const exempt = { operationId: 'createThing', 'x-required-role': 'member', 'x-error-format': 'problem', 'x-csrf-exempt': true, responses: ok };
    expect(() => readOperationRules(documentWith({ post: exempt }))).toThrow(/createThing accepts the session cookie and cannot be x-csrf-exempt/);
  });

  it('refuses operations of one path that answer errors in different formats (a 405 there answers in one)', () => {
    const get = { operationId: 'getThing', 'x-required-role': 'viewer', 'x-error-format': 'problem', responses: ok };
    const remove = { operationId: 'deleteThing', 'x-required-role': 'viewer', 'x-error-format': 'inference', responses: ok };
    expect(() => readOperationRules(documentWith({ get, delete: remove }))).toThrow(/the operations of \/things answer errors in different x-error-formats/);
  });
});

describe('the operation router', () => {
  const library = new OpenAPIRouter({ definition: real });
  const router = new OperationRouter(library.getOperations());
  const libraryAnswer = (method: string, path: string) => {
    try {
      return library.matchOperation({ method, path, headers: {} }, true).operationId;
    } catch (error) {
      return (error as Error).message.slice(0, 3);
    }
  };
  const ourAnswer = (method: string, path: string) => {
    const { operation, atPath } = router.match(method, path);
    return operation?.operationId ?? (atPath.length ? '405' : '404');
  };

  it('answers as openapi-backend’s own router, for every route of the document and for near misses', () => {
    const paths = Object.keys(real.paths ?? {}).flatMap((template) => {
      const path = template.replace(/\{[^}]+\}/g, 'x1');
      return [path, `${path}/`, `${path}//`, ` ${path}`, `${path}?a=1`, `${path}/extra`, path.slice(0, -1), path.toUpperCase()];
    });
    const cases = [...paths, '/', '', '/v1', '/v1/organization/api-keys/deployment-options', '/v1/invitations/by-token/abc/accept', 'v1/models'].flatMap((path) =>
      ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'].map((method) => [method, path] as const),
    );
    const differences = cases.filter(([method, path]) => ourAnswer(method, path) !== libraryAnswer(method, path));
    expect(differences).toEqual([]);
    expect(ourAnswer('PATCH', '/v1/organization/api-keys/deployment-options')).toBe('updateApiKey');
    expect(ourAnswer('GET', '/v1/organization/api-keys/deployment-options')).toBe('listApiKeyDeploymentOptions');
  });

  it('lists every operation of the path for a 405, whatever the method', () => {
    const { operation, atPath } = router.match('PUT', '/api/v1/model-deployments/0192f1c6');
    expect(operation).toBeUndefined();
    expect(atPath.map((o) => o.method).sort()).toEqual(['delete', 'get', 'patch']);
  });

  it('reads path parameters as openapi-backend reads them: each segment decoded, an encoded slash within one', () => {
    const operation = library.getOperations().find((o) => o.operationId === 'retrieveModel');
    if (!operation) throw new Error('no retrieveModel');
    const read = pathParameters(operation.path);
    for (const path of ['/v1/models/qwen2.5-instruct', '/v1/models/0192f1c6-2b9e-7c4e-9b1a-5d0c8e6f7a21/', '/v1/models/org%2Fmodel%20v2', '/v1/models/caf%C3%A9']) {
      expect(read(path)).toEqual(library.parseRequest({ method: 'GET', path, headers: {} }, operation).params);
    }
    expect(read('/v1/models/org%2Fmodel')).toEqual({ model: 'org/model' });
    // One that does not decode names nothing, as sent (the library throws).
    expect(read('/v1/models/%E0%A4%A')).toEqual({ model: '%E0%A4%A' });
    expect(pathParameters('/v1/models')('/v1/models')).toEqual({});
  });
});
