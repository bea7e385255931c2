import { describe, expect, it } from 'vitest';
import { enumDocs, withErrorExamples } from '../../src/cli/error-examples.ts';
import {
  closedManagementResponses,
  closedWhereStrict,
  nullableAsGeneratorsRead,
  withoutScalarExplode,
  withDeprecationHeaders,
  withHeaderExamples,
  withRequestIdHeader,
} from '../../src/cli/normalize-openapi.ts';
import { deprecationHeaders } from '../../src/http/operations.ts';
import { forJsonSchemaValidators } from '../../src/openapi-document.ts';

const document = (schemas: Record<string, unknown>) => ({ components: { schemas } });
const schemasOf = (out: object) => (out as { components: { schemas: Record<string, Record<string, unknown>> } }).components.schemas;

describe('nullable fields, as client generators read them', () => {
  it('adds null to the enum of a nullable enum', () => {
    const out = nullableAsGeneratorsRead(document({ S: { type: 'string', enum: ['a', 'b'], nullable: true } }));
    expect(out).toEqual(document({ S: { type: 'string', enum: ['a', 'b', null], nullable: true } }));
  });

  it('keeps a nullable model as TypeSpec writes it, typed allOf its reference', () => {
    const input = document({ N: { type: 'object', allOf: [{ $ref: '#/components/schemas/O' }], nullable: true, description: 'd' } });
    expect(nullableAsGeneratorsRead(structuredClone(input))).toEqual(input);
  });

  it('inlines a nullable enum reference as its values and null', () => {
    const out = nullableAsGeneratorsRead(
      document({ E: { type: 'string', enum: ['x', 'y'] }, M: { allOf: [{ $ref: '#/components/schemas/E' }], nullable: true, description: 'd' } }),
    );
    expect(schemasOf(out).M).toEqual({ type: 'string', enum: ['x', 'y', null], nullable: true, description: 'd' });
  });

  it('leaves plain nullable scalars alone', () => {
    const input = document({ S: { type: 'string', nullable: true, maxLength: 3 } });
    expect(nullableAsGeneratorsRead(structuredClone(input))).toEqual(input);
  });
});

describe('nullable fields, as JSON Schema validators read them', () => {
  it('turns a nullable reference into anyOf the reference and null of its type', () => {
    const out = forJsonSchemaValidators(
      document({
        E: { type: 'string', enum: ['x'] },
        M: { type: 'object', properties: { e: { allOf: [{ $ref: '#/components/schemas/E' }], nullable: true, description: 'd' } } },
      }),
    );
    expect(schemasOf(out).M?.properties).toEqual({
      e: { description: 'd', anyOf: [{ $ref: '#/components/schemas/E' }, { type: 'string', nullable: true, enum: [null] }] },
    });
  });

  it('leaves nullable scalars, which ajv reads, alone', () => {
    const input = document({ S: { type: 'string', nullable: true } });
    expect(forJsonSchemaValidators(input)).toEqual(input);
  });
});

describe('closed bodies', () => {
  it('writes a model closed with Record<never> as additionalProperties false', () => {
    const out = closedWhereStrict(document({ C: { type: 'object', properties: {}, additionalProperties: { not: {} } } }));
    expect(schemasOf(out).C?.additionalProperties).toBe(false);
  });

  it('closes what management routes answer, and nothing an inference route reaches', () => {
    const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
    const answer = (name: string) => ({ '200': { content: { 'application/json': { schema: ref(name) } } } });
    const input = {
      paths: {
        '/a': { get: { 'x-error-format': 'problem', responses: answer('Page') } },
        '/b': { post: { 'x-error-format': 'inference', responses: answer('Shared') } },
      },
      components: {
        schemas: {
          Page: { type: 'object', properties: { items: { type: 'array', items: ref('Item') }, shared: ref('Shared') } },
          Item: { type: 'object', properties: { id: { type: 'string' } } },
          Shared: { type: 'object', properties: { n: { type: 'integer' } } },
        },
      },
    };
    const schemas = schemasOf(closedManagementResponses(input));
    expect([schemas.Page?.additionalProperties, schemas.Item?.additionalProperties, schemas.Shared?.additionalProperties]).toEqual([false, false, undefined]);
  });
});

describe('the X-Request-Id header', () => {
  it('is declared once and on every response', () => {
    const input = { paths: { '/a': { get: { responses: { '200': {}, default: { headers: { Allow: {} } } } } } } };
    const out = withRequestIdHeader(input) as unknown as typeof input & { components: { headers: Record<string, unknown> } };
    expect(out.components.headers['X-Request-Id']).toMatchObject({ required: true, schema: { type: 'string' } });
    expect(Object.values(out.paths['/a'].get.responses).map((r) => Object.keys((r as { headers: object }).headers))).toEqual([['X-Request-Id'], ['Allow', 'X-Request-Id']]);
  });
});

describe('header examples', () => {
  it("makes a response header's x-example its example, a list as it stands", () => {
    const lines = ['a=1; Path=/; HttpOnly', 'b=2; Path=/'];
    const input = { paths: { '/a': { post: { responses: { '200': { headers: { 'Set-Cookie': { schema: {}, 'x-example': lines }, Other: { schema: {} } } } } } } } };
    const out = withHeaderExamples(input) as unknown as typeof input;
    expect(out.paths['/a'].post.responses['200'].headers).toEqual({ 'Set-Cookie': { schema: {}, example: lines }, Other: { schema: {} } });
  });
});

describe('deprecation', () => {
  it('marks an operation with x-deprecation deprecated and declares Deprecation and Sunset on its answers', () => {
    const input = { paths: { '/a': { get: { 'x-deprecation': { since: '2026-11-01', sunset: '2027-07-01' }, responses: { '200': {} } }, post: { responses: { '200': {} } } } } };
    const out = withDeprecationHeaders(input) as unknown as { paths: { '/a': Record<string, { deprecated?: boolean; responses: Record<string, { headers?: object }> }> } };
    expect(out.paths['/a'].get?.deprecated).toBe(true);
    expect(Object.keys(out.paths['/a'].get?.responses['200']?.headers ?? {})).toEqual(['Deprecation', 'Sunset']);
    expect(out.paths['/a'].post?.deprecated).toBeUndefined();
  });

  it('writes the headers from the dates: Deprecation as @<Unix seconds>, Sunset as an HTTP date', () => {
    expect(deprecationHeaders({ since: '2026-11-01', sunset: '2027-07-01' })).toEqual({ Deprecation: '@1793491200', Sunset: 'Thu, 01 Jul 2027 00:00:00 GMT' });
    expect(deprecationHeaders(undefined)).toBeUndefined();
    expect(() => deprecationHeaders({ since: 'soon' })).toThrow(/since and sunset/);
  });
});

describe('error examples', () => {
  it('reads the one-line docs of an enum of spec/common/errors.tsp', () => {
    expect(enumDocs('ErrorCode').get('DEPLOYMENT_DELETION_PENDING')).toBe("The deployment's cloud resources are still being cleaned up.");
    expect(enumDocs('InferenceErrorCode').get('model_not_found')).toMatch(/matches the model/);
  });

  it('gives each error response one example per code its description names with that status, in the server\'s shape', () => {
    const problem = (description: string) => ({ description, content: { 'application/json': { schema: {} } } });
    const input = {
      paths: {
        '/d/{id}': {
          delete: {
            'x-error-format': 'problem',
            parameters: [{ name: 'id', in: 'path' }],
            responses: {
              '403': problem('`FORBIDDEN` or `CSRF_FAILED`.'),
              '409': problem('`DEPLOYMENT_DELETION_PENDING`; unlike `NOT_FOUND` (404).'),
              default: problem('500 `INTERNAL_ERROR`, 403 `FORBIDDEN`.'),
            },
          },
          get: { 'x-error-format': 'problem', responses: { '403': problem('`FORBIDDEN` or `CSRF_FAILED`.') } },
        },
      },
    };
    type Responses = Record<string, { 'x-error-codes': string[]; content: { 'application/json': { examples: Record<string, { value: { status: number } }> } } }>;
    const paths = (withErrorExamples(input) as unknown as { paths: Record<string, Record<string, { responses: Responses }>> }).paths['/d/{id}'];
    const responses = paths?.delete?.responses as Responses;
    expect(responses['409']?.['x-error-codes']).toEqual(['DEPLOYMENT_DELETION_PENDING']);
    expect(responses['409']?.content['application/json'].examples.DEPLOYMENT_DELETION_PENDING?.value).toMatchObject({ status: 409, code: 'DEPLOYMENT_DELETION_PENDING' });
    expect(responses.default?.['x-error-codes']).toEqual(['INTERNAL_ERROR']);
    // The Origin and CSRF checks run on state-changing methods only.
    expect(responses['403']?.['x-error-codes']).toEqual(['FORBIDDEN', 'CSRF_FAILED']);
    expect(paths?.get?.responses['403']?.['x-error-codes']).toEqual(['FORBIDDEN']);
  });

  it('stops generation when an error response names no code of its status', () => {
    const input = { paths: { '/a': { get: { responses: { '404': { description: 'Gone.', content: { 'application/json': { schema: {} } } } } } } } };
    expect(() => withErrorExamples(input)).toThrow(/GET \/a 404/);
  });
});

describe('query parameters with explode false', () => {
  it('drops explode false from a scalar query parameter and keeps it on an array, inline or by reference', () => {
    const input = {
      paths: {
        '/things': {
          get: {
            parameters: [
              { name: 'q', in: 'query', explode: false, schema: { type: 'string' } },
              { name: 'ids', in: 'query', explode: false, schema: { type: 'array', items: { type: 'string' } } },
              { name: 'tags', in: 'query', explode: false, schema: { $ref: '#/components/schemas/Tags' } },
            ],
          },
        },
      },
      components: {
        schemas: { Tags: { type: 'array', items: { type: 'string' } } },
        parameters: { Limit: { name: 'limit', in: 'query', explode: false, schema: { type: 'integer' } } },
      },
    };
    const out = withoutScalarExplode(structuredClone(input)) as typeof input;
    expect(out.paths['/things'].get.parameters.map((p) => 'explode' in p)).toEqual([false, true, true]);
    expect('explode' in out.components.parameters.Limit).toBe(false);
  });
});
