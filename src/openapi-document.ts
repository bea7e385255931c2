import { readFileSync } from 'node:fs';
import type { Document } from 'openapi-backend';

export const OPENAPI_PATH = new URL('../generated/openapi.json', import.meta.url);

/** The generated OpenAPI document the server is bound to, as published. */
export function loadOpenApiDocument(): Document {
  return JSON.parse(readFileSync(OPENAPI_PATH, 'utf8')) as Document;
}

type Schema = Record<string, unknown>;

/**
 * The document as a JSON Schema validator (ajv: openapi-backend's, the tests') must read it. The
 * document writes `Model | null` as `{allOf: [$ref], nullable: true}`, the shape client generators
 * type `T | null`; ajv honours `nullable` only beside a `type` (and throws without one), so here
 * such a schema becomes `anyOf: [<the schema>, <null of that type>]`, which admits the same values.
 */
export function forJsonSchemaValidators<T extends object>(document: T): T {
  const schemas = (((document as Schema).components as Schema | undefined)?.schemas ?? {}) as Record<string, Schema>;
  const typeOf = (schema: Schema): string | undefined => {
    if (typeof schema.type === 'string') return schema.type;
    const ref = schema.$ref;
    if (typeof ref === 'string' && ref.startsWith('#/components/schemas/')) {
      const target = schemas[ref.slice('#/components/schemas/'.length)];
      return target ? typeOf(target) : undefined;
    }
    return undefined;
  };
  const visit = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(visit);
    if (!node || typeof node !== 'object') return node;
    const schema = Object.fromEntries(Object.entries(node).map(([key, value]) => [key, visit(value)])) as Schema;
    const composed = ['allOf', 'anyOf', 'oneOf'].some((key) => Array.isArray(schema[key]));
    if (schema.nullable !== true || (schema.type !== undefined && !composed)) return schema;
    const { nullable: _, description, ...rest } = schema;
    const allOf = rest.allOf as Schema[] | undefined;
    const only = allOf?.length === 1 && Object.keys(rest).every((key) => key === 'allOf' || key === 'type') ? allOf[0] : undefined;
    const inner = only ?? rest;
    const nullOnly = { type: typeOf(inner) ?? 'object', nullable: true, enum: [null] };
    return { ...(description === undefined ? {} : { description }), anyOf: [inner, nullOnly] };
  };
  return visit(document) as T;
}
