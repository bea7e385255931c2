/**
 * Post-compilation step of `make generate`: states TypeSpec's output the way OpenAPI 3.0.3 defines
 * it and the way client generators and Prism read it alike. The server and the tests' validators
 * read this same file (through `forJsonSchemaValidators`, src/openapi-document.ts). Each rewrite
 * and why: docs/decisions/2026-11-23-openapi-3-0-3-not-3-1.md.
 *
 * Usage: node src/cli/normalize-openapi.ts generated/openapi.json
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { INBOUND_ID } from '../http/request-log.ts';
import { REQUEST_ID, withErrorExamples } from './error-examples.ts';

type Schema = Record<string, unknown>;

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

/** Applies `change` to every object node of the document, depth first; its result replaces the node. */
function mapNodes(node: unknown, change: (schema: Schema) => Schema): unknown {
  if (Array.isArray(node)) return node.map((item) => mapNodes(item, change));
  if (!node || typeof node !== 'object') return node;
  return change(Object.fromEntries(Object.entries(node).map(([key, value]) => [key, mapNodes(value, change)])) as Schema);
}

/** `additionalProperties: {not: {}}` (a closed model) as `false`: generators type the former as an open map. */
export function closedWhereStrict(document: Schema): Schema {
  return mapNodes(document, (schema) => {
    const extra = schema.additionalProperties as Schema | undefined;
    const forbidsAll = extra && typeof extra === 'object' && Object.keys(extra).length === 1 && JSON.stringify(extra.not) === '{}';
    return forbidsAll ? { ...schema, additionalProperties: false } : schema;
  }) as Schema;
}

/** Nullable schemas in the shape every generator types `T | null`; a nullable enum lists null. */
export function nullableAsGeneratorsRead(document: Schema): Schema {
  const schemas = ((document.components as Schema | undefined)?.schemas ?? {}) as Record<string, Schema>;
  const referenced = (schema: Schema): Schema | undefined => {
    const ref = Array.isArray(schema.allOf) && schema.allOf.length === 1 ? (schema.allOf[0] as Schema).$ref : undefined;
    return typeof ref === 'string' ? schemas[ref.split('/').pop() ?? ''] : undefined;
  };
  return mapNodes(document, (schema) => {
    if (schema.nullable !== true) return schema;
    const target = referenced(schema);
    if (Array.isArray(target?.enum)) {
      // A nullable enum by reference: inline, so every generator keeps its values (orval reads a
      // typed allOf as the bare type) and every validator reads `nullable` beside its `type`.
      const { allOf: _, ...rest } = schema;
      schema = { type: target.type, enum: target.enum, ...rest };
    }
    if (Array.isArray(schema.enum) && !schema.enum.includes(null)) schema = { ...schema, enum: [...schema.enum, null] };
    return schema;
  }) as Schema;
}

interface Operation {
  parameters?: Schema[];
  requestBody?: { content?: Record<string, { schema?: unknown }> };
  responses?: Record<string, Response>;
  'x-error-format'?: string;
}
interface Response {
  headers?: Record<string, unknown>;
  content?: Record<string, { schema?: unknown }>;
}

export function operationsOf(document: Schema): Operation[] {
  const paths = (document.paths ?? {}) as Record<string, Record<string, Operation | undefined>>;
  return Object.values(paths).flatMap((item) => METHODS.flatMap((method) => (item[method] ? [item[method]] : [])));
}

/** Drops `explode: false` on scalar query parameters: openapi-backend would split their values at commas. */
export function withoutScalarExplode(document: Schema): Schema {
  const components = (document.components ?? {}) as { schemas?: Record<string, Schema>; parameters?: Record<string, Schema> };
  const schemas = components.schemas ?? {};
  const isArray = (schema: Schema | undefined): boolean =>
    schema?.type === 'array' || (typeof schema?.$ref === 'string' && schemas[schema.$ref.split('/').pop() ?? '']?.type === 'array');
  const parameters: Schema[] = [...Object.values(components.parameters ?? {}), ...operationsOf(document).flatMap((operation) => operation.parameters ?? [])];
  for (const pathItem of Object.values((document.paths ?? {}) as Record<string, { parameters?: Schema[] }>)) parameters.push(...(pathItem.parameters ?? []));
  for (const parameter of parameters) {
    if (parameter.in === 'query' && parameter.explode === false && !isArray(parameter.schema as Schema | undefined)) delete parameter.explode;
  }
  return document;
}

/** The names of the component schemas `node` refers to, directly or through other schemas. */
function reachableSchemas(node: unknown, schemas: Record<string, Schema>, found = new Set<string>()): Set<string> {
  if (Array.isArray(node)) for (const item of node) reachableSchemas(item, schemas, found);
  else if (node && typeof node === 'object') {
    const ref = (node as Schema).$ref;
    if (typeof ref === 'string' && ref.startsWith('#/components/schemas/')) {
      const name = ref.slice('#/components/schemas/'.length);
      if (!found.has(name)) {
        found.add(name);
        reachableSchemas(schemas[name], schemas, found);
      }
    }
    for (const value of Object.values(node)) reachableSchemas(value, schemas, found);
  }
  return found;
}

/** Management response bodies closed (the service answers exactly their fields), so a mock invents none. */
export function closedManagementResponses(document: Schema): Schema {
  const schemas = ((document.components as Schema | undefined)?.schemas ?? {}) as Record<string, Schema>;
  const operations = operationsOf(document);
  const open = reachableSchemas(operations.filter((operation) => operation['x-error-format'] !== 'problem'), schemas);
  // A request body left open on purpose (the payment processor's events) stays open wherever it is used.
  for (const operation of operations) {
    for (const media of Object.values(operation.requestBody?.content ?? {})) {
      const ref = (media.schema as Schema | undefined)?.$ref;
      const name = typeof ref === 'string' ? ref.split('/').pop() : undefined;
      if (name && schemas[name]?.additionalProperties === undefined) for (const reached of reachableSchemas(media.schema, schemas)) open.add(reached);
    }
  }
  const management = operations.filter((operation) => operation['x-error-format'] === 'problem');
  const responses = management.flatMap((operation) => Object.values(operation.responses ?? {}));
  for (const name of reachableSchemas(responses, schemas)) {
    const schema = schemas[name];
    if (!open.has(name) && schema?.type === 'object' && schema.properties && schema.additionalProperties === undefined) schema.additionalProperties = false;
  }
  return document;
}

const REQUEST_ID_HEADER = {
  description: 'The id of this request, in logs and in error bodies (`request_id`). A well-formed inbound `X-Request-Id` is kept.',
  required: true,
  schema: { type: 'string', pattern: INBOUND_ID.source },
  example: REQUEST_ID,
};

/** Every response declares the `X-Request-Id` header the service sends on every answer. */
export function withRequestIdHeader(document: Schema): Schema {
  const components = (document.components ??= {}) as Schema;
  components.headers = { ...(components.headers as Schema | undefined), 'X-Request-Id': REQUEST_ID_HEADER };
  for (const operation of operationsOf(document)) {
    for (const response of Object.values(operation.responses ?? {})) {
      response.headers = { ...response.headers, 'X-Request-Id': { $ref: '#/components/headers/X-Request-Id' } };
    }
  }
  return document;
}

/**
 * The schema of a `text/event-stream` response is that of each event's data (TypeSpec cannot say
 * "a stream of"); its example is written as sent: that event, then `data: [DONE]`, so a mock
 * streams what the service streams. An operation with `x-event-stream` (`{id, event}`: the fields
 * of the data that are the event's `id:` and `event:` lines) streams events so framed and no
 * `[DONE]` (a stream that stays open: the deployment events).
 */
export function eventStreamExamplesAsSent(document: Schema): Schema {
  for (const operation of operationsOf(document)) {
    const framing = (operation as Schema)['x-event-stream'] as { id?: string; event?: string } | undefined;
    const asSent = (data: unknown) => {
      if (typeof data === 'string') return data;
      if (!framing) return `data: ${JSON.stringify(data)}\n\ndata: [DONE]\n\n`;
      const fields = data as Record<string, unknown>;
      const id = framing.id ? `id: ${String(fields[framing.id])}\n` : '';
      const event = framing.event ? `event: ${String(fields[framing.event])}\n` : '';
      return `retry: 3000\n\n${id}${event}data: ${JSON.stringify(data)}\n\n`;
    };
    for (const response of Object.values(operation.responses ?? {})) {
      const media = response.content?.['text/event-stream'] as { example?: unknown; examples?: Record<string, { value?: unknown }> } | undefined;
      const first = media?.example ?? Object.values(media?.examples ?? {})[0]?.value;
      if (!media || first === undefined) continue;
      // One `example`: Prism takes it before any schema-level example, which is an object it cannot stream.
      delete media.examples;
      media.example = asSent(first);
    }
  }
  return document;
}

const DEPRECATION_HEADERS = {
  Deprecation: {
    description: 'RFC 9745: since when the operation is deprecated, as `@<Unix seconds>` (its `x-deprecation.since`).',
    required: true,
    schema: { type: 'string', pattern: '^@[0-9]+$' },
    example: '@1798761600',
  },
  Sunset: {
    description: 'RFC 8594: when the operation stops answering, as an HTTP date (its `x-deprecation.sunset`).',
    required: true,
    schema: { type: 'string' },
    example: 'Thu, 01 Jul 2027 00:00:00 GMT',
  },
};

/** Examples of the headers an API key's limits add to inference answers (spec/inference/operations.tsp). */
const LIMIT_HEADER_EXAMPLES: Record<string, string | number> = {
  'Retry-After': 1,
  'retry-after-ms': 850,
  'x-should-retry': 'false',
  'x-ratelimit-limit-requests': 600,
  'x-ratelimit-remaining-requests': 599,
  'x-ratelimit-reset-requests': '100ms',
  'x-ratelimit-limit-tokens': 200000,
  'x-ratelimit-remaining-tokens': 199958,
  'x-ratelimit-reset-tokens': '12ms',
};

export function withLimitHeaderExamples(document: Schema): Schema {
  for (const operation of operationsOf(document)) {
    for (const response of Object.values(operation.responses ?? {})) {
      for (const [name, header] of Object.entries(response.headers ?? {}) as Array<[string, Schema]>) {
        if (name in LIMIT_HEADER_EXAMPLES && !header.$ref && header.example === undefined) header.example = LIMIT_HEADER_EXAMPLES[name];
      }
    }
  }
  return document;
}

/** TypeSpec writes no example for a response header: the one the spec states as `x-example` becomes its `example`. */
export function withHeaderExamples(document: Schema): Schema {
  for (const operation of operationsOf(document)) {
    for (const response of Object.values(operation.responses ?? {})) {
      for (const header of Object.values(response.headers ?? {}) as Schema[]) {
        if (!('x-example' in header)) continue;
        header.example = header['x-example'];
        delete header['x-example'];
      }
    }
  }
  return document;
}

/** An operation with `x-deprecation` is `deprecated`, and each of its answers declares `Deprecation` and `Sunset`. */
export function withDeprecationHeaders(document: Schema): Schema {
  const deprecated = operationsOf(document).filter((operation) => (operation as Schema)['x-deprecation'] !== undefined);
  if (!deprecated.length) return document;
  const components = (document.components ??= {}) as Schema;
  components.headers = { ...(components.headers as Schema | undefined), ...DEPRECATION_HEADERS };
  for (const operation of deprecated) {
    (operation as Schema).deprecated = true;
    for (const response of Object.values(operation.responses ?? {})) {
      response.headers = { ...response.headers, Deprecation: { $ref: '#/components/headers/Deprecation' }, Sunset: { $ref: '#/components/headers/Sunset' } };
    }
  }
  return document;
}

export function normalize(document: Schema): Schema {
  const normalized = nullableAsGeneratorsRead(closedWhereStrict(document));
  normalized.openapi = '3.0.3';
  return withErrorExamples(withHeaderExamples(withLimitHeaderExamples(withDeprecationHeaders(withRequestIdHeader(eventStreamExamplesAsSent(closedManagementResponses(withoutScalarExplode(normalized))))))));
}

const [file] = process.argv.slice(2);
if (file) {
  const document = JSON.parse(readFileSync(file, 'utf8')) as Schema;
  writeFileSync(file, `${JSON.stringify(normalize(document), null, 2)}\n`);
}
