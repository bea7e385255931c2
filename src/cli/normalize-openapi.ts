/**
 * Post-compilation step of `make generate`: states TypeSpec's output the way OpenAPI 3.0.3 defines
 * it, so that every reader (ajv in openapi-backend, Prism, client generators) reads it alike, and the
 * document served, mocked and enforced is one and the same file.
 *
 * - `nullable: true` next to an `enum` admits null only if the enum lists it: null is appended.
 * - `nullable: true` without a `type`, or beside `allOf`/`anyOf`/`oneOf` (TypeSpec writes
 *   `{allOf: [$ref], nullable: true}` for `Model | null`), does not admit null in 3.0.3: the schema
 *   becomes `anyOf: [<the schema>, <null of that type>]`.
 * - `explode: false` on a query parameter whose schema is not an array is dropped: TypeSpec writes it
 *   on every query parameter, `explode` has no effect on a scalar (Parameter Object), and
 *   openapi-backend would split such a value at commas into an array (a string with a comma would
 *   fail validation or lose it).
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

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

export function withoutScalarExplode(document: Schema): Schema {
  const components = (document.components ?? {}) as { schemas?: Record<string, Schema>; parameters?: Record<string, Schema> };
  const schemas = components.schemas ?? {};
  const isArray = (schema: Schema | undefined): boolean =>
    schema?.type === 'array' || (typeof schema?.$ref === 'string' && schemas[schema.$ref.split('/').pop() ?? '']?.type === 'array');
  const parameters: Schema[] = Object.values(components.parameters ?? {});
  for (const pathItem of Object.values((document.paths ?? {}) as Record<string, Record<string, { parameters?: Schema[] } | undefined>>)) {
    parameters.push(...((pathItem.parameters ?? []) as Schema[]));
    for (const method of METHODS) parameters.push(...(pathItem[method]?.parameters ?? []));
  }
  for (const parameter of parameters) {
    if (parameter.in === 'query' && parameter.explode === false && !isArray(parameter.schema as Schema | undefined)) delete parameter.explode;
  }
  return document;
}

export function normalize(document: Schema): Schema {
  return withoutScalarExplode(normalizeNullable(document));
}

const [file] = process.argv.slice(2);
if (file) {
  const document = JSON.parse(readFileSync(file, 'utf8')) as Schema;
  writeFileSync(file, `${JSON.stringify(normalize(document), null, 2)}\n`);
}
