import { describe, expect, it } from 'vitest';
import { normalizeNullable, withoutScalarExplode } from '../../src/cli/normalize-openapi.ts';

const document = (schemas: Record<string, unknown>) => ({ components: { schemas } });

describe('OpenAPI 3.0.3 nullable normalization', () => {
  it('adds null to the enum of a nullable enum', () => {
    const out = normalizeNullable(document({ S: { type: 'string', enum: ['a', 'b'], nullable: true } }));
    expect(out).toEqual(document({ S: { type: 'string', enum: ['a', 'b', null], nullable: true } }));
  });

  it('turns a nullable reference into anyOf the reference and null of its type', () => {
    const out = normalizeNullable(
      document({
        E: { type: 'string', enum: ['x'] },
        M: { type: 'object', properties: { e: { allOf: [{ $ref: '#/components/schemas/E' }], nullable: true, description: 'd' } } },
      }),
    );
    expect((out.components as { schemas: Record<string, { properties?: unknown }> }).schemas.M?.properties).toEqual({
      e: { description: 'd', anyOf: [{ $ref: '#/components/schemas/E' }, { type: 'string', nullable: true, enum: [null] }] },
    });
  });

  it('handles the typed form TypeSpec writes for nullable models', () => {
    const out = normalizeNullable(
      document({ O: { type: 'object' }, N: { type: 'object', allOf: [{ $ref: '#/components/schemas/O' }], nullable: true } }),
    );
    expect((out.components as { schemas: Record<string, unknown> }).schemas.N).toEqual({
      anyOf: [{ $ref: '#/components/schemas/O' }, { type: 'object', nullable: true, enum: [null] }],
    });
  });

  it('leaves plain nullable scalars alone', () => {
    const input = document({ S: { type: 'string', nullable: true, maxLength: 3 } });
    expect(normalizeNullable(input)).toEqual(input);
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
