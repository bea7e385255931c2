import fc from 'fast-check';

/**
 * fast-check arbitraries from the published document's schemas (OpenAPI 3.0: `$ref`, `nullable`,
 * `allOf`/`oneOf`/`anyOf`, enums, formats, patterns, bounds): values a client generated from the
 * document may send, and the hostile values a client may send anyway.
 */
export interface Schema {
  $ref?: string;
  type?: string;
  format?: string;
  pattern?: string;
  enum?: unknown[];
  nullable?: boolean;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number | boolean;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  uniqueItems?: boolean;
  items?: Schema;
  properties?: Record<string, Schema>;
  required?: string[];
  additionalProperties?: boolean | Schema;
  allOf?: Schema[];
  oneOf?: Schema[];
  anyOf?: Schema[];
}

type Components = Record<string, Schema>;

const MAX_DEPTH = 5;
/** Generated strings and arrays stay short: the limits themselves are probed by the mutations. */
const SHORT = 24;

export function resolve(schema: Schema, components: Components): Schema {
  let current = schema;
  while (current.$ref) current = components[current.$ref.replace('#/components/schemas/', '')] ?? {};
  return current;
}

/** Valid values of `schema`: what a generated client sends. */
export function validValue(schema: Schema, components: Components, depth = 0): fc.Arbitrary<unknown> {
  const s = resolve(schema, components);
  const base = nonNull(s, components, depth);
  return s.nullable ? fc.option(base, { nil: null, freq: 6 }) : base;
}

function nonNull(s: Schema, components: Components, depth: number): fc.Arbitrary<unknown> {
  if (s.enum) return fc.constantFrom(...s.enum.filter((value) => value !== null));
  if (s.allOf) return validValue(merge(s.allOf.map((part) => resolve(part, components))), components, depth);
  const choices = s.oneOf ?? s.anyOf;
  if (choices) return fc.oneof(...choices.map((choice) => validValue(choice, components, depth + 1)));
  switch (s.type) {
    case 'string':
      return stringOf(s);
    case 'integer': {
      const min = s.minimum ?? (s.exclusiveMinimum === true ? 1 : -1_000);
      return fc.integer({ min, max: Math.max(min, s.maximum ?? min + 10_000) });
    }
    case 'number':
      return fc.double({ min: s.minimum ?? -1_000, max: s.maximum ?? 1_000, noNaN: true, noDefaultInfinity: true });
    case 'boolean':
      return fc.boolean();
    case 'array': {
      if (depth >= MAX_DEPTH) return fc.constant([]);
      const item = validValue(s.items ?? {}, components, depth + 1);
      const constraints = { minLength: s.minItems ?? 0, maxLength: Math.max(s.minItems ?? 0, Math.min(s.maxItems ?? 3, 3)) };
      return s.uniqueItems ? fc.uniqueArray(item, { ...constraints, selector: (value) => JSON.stringify(value) }) : fc.array(item, constraints);
    }
    case 'object':
    case undefined: {
      if (!s.properties) return fc.constant({});
      if (depth >= MAX_DEPTH) return fc.constant({});
      const record = Object.fromEntries(Object.entries(s.properties).map(([name, property]) => [name, validValue(property, components, depth + 1)]));
      return fc.record(record, { requiredKeys: (s.required ?? []).filter((name) => name in record) });
    }
    default:
      return fc.constant(null);
  }
}

function stringOf(s: Schema): fc.Arbitrary<string> {
  const minLength = s.minLength ?? 0;
  const maxLength = Math.max(minLength, Math.min(s.maxLength ?? SHORT, SHORT));
  switch (s.format) {
    case 'date-time':
      return fc.date({ min: new Date('2000-01-01'), max: new Date('2100-01-01'), noInvalidDate: true }).map((date) => date.toISOString());
    case 'uuid':
      return fc.uuid();
    case 'email':
      return fc.emailAddress().filter((email) => email.length <= (s.maxLength ?? 254));
    case 'uri':
    case 'url':
      return fc.webUrl();
    case 'binary':
      return fc.string({ minLength, maxLength });
  }
  if (s.pattern) {
    const within = (value: string) => value.length >= minLength && value.length <= (s.maxLength ?? Number.POSITIVE_INFINITY);
    return fc.stringMatching(new RegExp(s.pattern)).filter(within);
  }
  return fc.string({ minLength, maxLength, unit: 'binary' });
}

function merge(parts: Schema[]): Schema {
  return {
    type: 'object',
    properties: Object.assign({}, ...parts.map((part) => part.properties ?? {})),
    required: parts.flatMap((part) => part.required ?? []),
  };
}

/** Values no schema of the document accepts where it asks for something else, and edge values. */
export const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(null, '', ' ', '\u0000', 'x'.repeat(70_000), '😀'.repeat(600), '__proto__', '{"$ne":null}', "' or 1=1 --", '../../etc/passwd', 'NaN', '1e309'),
  fc.constantFrom(0, -1, 2 ** 31, 2 ** 53 + 1, -(2 ** 63), 1e308, -0, 0.5),
  fc.constantFrom(true, false, [], {}, [null], { a: { b: { c: {} } } }),
  fc.string({ unit: 'grapheme', maxLength: 50 }),
  fc.integer(),
  fc.double(),
);

/** Path segments of every shape, for ids. */
export const hostileSegment: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom('0', '-1', '1', '2147483648', '99999999999999999999', 'not-a-uuid', '%00', '%2e%2e', 'null', 'undefined', '%F0%9F%98%80', 'a'.repeat(300), '1.5', '0x10', ' 1'),
  fc.uuid(),
  fc.integer({ min: 1, max: 100 }).map(String),
  fc.string({ unit: 'grapheme', minLength: 1, maxLength: 20 }).map(encodeURIComponent),
);

/** Bodies that are not JSON at all, or not the JSON asked for. */
export const malformedJson: fc.Arbitrary<string> = fc.constantFrom('{', '{"a":', '[1,2', 'nul', '"unterminated', '{"a":1}{"b":2}', '\u0000', '{"__proto__":{"admin":true}}', '1'.repeat(400), '');
