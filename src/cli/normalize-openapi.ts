/**
 * Post-compilation step of `make generate`: states TypeSpec's nullable output the way OpenAPI
 * 3.0.3 defines `nullable`, so that every validator (ajv in openapi-backend, Prism) reads it alike.
 *
 * - `nullable: true` next to an `enum` admits null only if the enum lists it: null is appended.
 * - `nullable: true` without a `type`, or beside `allOf`/`anyOf`/`oneOf` (TypeSpec writes
 *   `{allOf: [$ref], nullable: true}` for `Model | null`), does not admit null in 3.0.3: the schema
 *   becomes `anyOf: [<the schema>, <null of that type>]`.
 *
 * Usage: node src/cli/normalize-openapi.ts generated/openapi.json
 */
import { readFileSync, writeFileSync } from 'node:fs';

type Schema = Record<string, unknown>;

export function normalizeNullable(document: Schema): Schema {
  const schemas = ((document.components as Schema | undefined)?.schemas ?? {}) as Record<string, Schema>;
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
    if (schema.nullable !== true) return schema;
    if (Array.isArray(schema.enum) && !schema.enum.includes(null)) {
      schema.enum = [...schema.enum, null];
    }
    const composed = ['allOf', 'anyOf', 'oneOf'].some((key) => Array.isArray(schema[key]));
    if (schema.type === undefined || composed) {
      const { nullable: _, description, ...rest } = schema;
      const allOf = rest.allOf as Schema[] | undefined;
      const only = allOf?.length === 1 && Object.keys(rest).every((key) => key === 'allOf' || key === 'type') ? allOf[0] : undefined;
      const inner = only ?? rest;
      const nullOnly = { type: typeOf(inner) ?? 'object', nullable: true, enum: [null] };
      return { ...(description === undefined ? {} : { description }), anyOf: [inner, nullOnly] };
    }
    return schema;
  };
  return visit(document) as Schema;
}

const [file] = process.argv.slice(2);
if (file) {
  const document = JSON.parse(readFileSync(file, 'utf8')) as Schema;
  writeFileSync(file, `${JSON.stringify(normalizeNullable(document), null, 2)}\n`);
}
