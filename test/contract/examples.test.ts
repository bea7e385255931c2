import { Ajv } from 'ajv';
import addFormats from 'ajv-formats';
import { describe, expect, it } from 'vitest';
import { forJsonSchemaValidators, loadOpenApiDocument } from '../../src/openapi-document.ts';

/** Every example of the document (the ones Prism serves) is valid against its own schema. */
const document = forJsonSchemaValidators(loadOpenApiDocument()) as unknown as {
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, { example?: unknown }> };
};
interface MediaType {
  schema?: unknown;
  example?: unknown;
  examples?: Record<string, { value: unknown }>;
}
interface Operation {
  operationId: string;
  requestBody?: { content: Record<string, MediaType> };
  responses: Record<string, { content?: Record<string, MediaType>; headers?: Record<string, { example?: unknown }>; 'x-error-codes'?: string[] }>;
}

const ajv = new Ajv({ strict: false, allErrors: true });
addFormats.default(ajv);
ajv.addSchema(document, 'openapi.json');

const pointer = (...segments: string[]) =>
  `openapi.json#/${segments.map((s) => s.replaceAll('~', '~0').replaceAll('/', '~1')).join('/')}`;

interface Case {
  name: string;
  schemaRef: string;
  value: unknown;
}

function mediaCases(where: string, base: string[], content: Record<string, MediaType> = {}): Case[] {
  return Object.entries(content).flatMap(([type, media]) => {
    const schemaRef = pointer(...base, type, 'schema');
    const named = Object.entries(media.examples ?? {}).map(([key, example]) => ({ name: `${where} ${type} (${key})`, schemaRef, value: example.value }));
    return media.example === undefined ? named : [{ name: `${where} ${type}`, schemaRef, value: media.example }, ...named];
  });
}

const operations = Object.entries(document.paths).flatMap(([path, item]) =>
  Object.entries(item).map(([method, operation]) => ({ path, method, operation })),
);

const cases: Case[] = [
  ...operations.flatMap(({ path, method, operation }) => [
    ...mediaCases(`${operation.operationId} request`, ['paths', path, method, 'requestBody', 'content'], operation.requestBody?.content),
    ...Object.entries(operation.responses).flatMap(([status, response]) =>
      mediaCases(`${operation.operationId} ${status}`, ['paths', path, method, 'responses', status, 'content'], response.content),
    ),
    // The examples of response headers (the session cookies' Set-Cookie lines, the limit headers), which Prism sends.
    ...Object.entries(operation.responses).flatMap(([status, response]) =>
      Object.entries(response.headers ?? {})
        .filter(([, header]) => header.example !== undefined)
        .map(([name, header]) => ({ name: `${operation.operationId} ${status} header ${name}`, schemaRef: pointer('paths', path, method, 'responses', status, 'headers', name, 'schema'), value: header.example })),
    ),
  ]),
  ...Object.entries(document.components.schemas)
    .filter(([, schema]) => schema.example !== undefined)
    .map(([name, schema]) => ({ name: `schema ${name}`, schemaRef: pointer('components', 'schemas', name), value: schema.example })),
];

describe('OpenAPI examples', () => {
  it('exist for every operation whose success response has a body', () => {
    const hasBody = (operation: Operation) =>
      Object.entries(operation.responses).some(([status, response]) => /^2/.test(status) && response.content);
    const withoutExample = operations
      .filter(({ operation }) => hasBody(operation))
      .filter(({ operation }) => !Object.values(operation.responses).some((response) => mediaCases('', [], response.content).length > 0))
      .map(({ operation }) => operation.operationId);
    expect(withoutExample).toEqual([]);
    expect(cases.length).toBeGreaterThan(operations.length);
  });

  it.each(cases.map((c) => [c.name, c] as const))('%s is valid against its schema', (name, { schemaRef, value }) => {
    const validate = ajv.getSchema(schemaRef) ?? ajv.compile({ $ref: schemaRef });
    // An event stream's schema is each event's data; its example is the stream as sent, ending with [DONE].
    const values = name.includes('text/event-stream') ? eventsOf(value, openStreams.has(name.split(' ')[0] ?? '')) : [value];
    expect(values.length).toBeGreaterThan(0);
    for (const one of values) {
      const valid = validate(one);
      expect(validate.errors ?? [], JSON.stringify(one).slice(0, 300)).toEqual([]);
      expect(valid).toBe(true);
    }
  });
});

/** Operations whose event stream stays open (`x-event-stream`): framed with `id:` and `event:`, no `[DONE]`. */
const openStreams = new Set(operations.filter(({ operation }) => (operation as { 'x-event-stream'?: unknown })['x-event-stream']).map(({ operation }) => operation.operationId));

/** The data of each event of a `text/event-stream` example, which must end with `data: [DONE]` (unless the stream stays open). */
function eventsOf(stream: unknown, open: boolean): unknown[] {
  expect(typeof stream).toBe('string');
  const data = [...String(stream).matchAll(/^data: (.*)$/gm)].map((match) => match[1] as string);
  if (open) {
    expect(data).not.toContain('[DONE]');
    return data.map((event) => JSON.parse(event) as unknown);
  }
  expect(data.at(-1)).toBe('[DONE]');
  return data.slice(0, -1).map((event) => JSON.parse(event) as unknown);
}

describe('error examples', () => {
  it('every error response has an example per code it lists, whose status is the response\'s', () => {
    const wrong = operations.flatMap(({ operation }) =>
      Object.entries(operation.responses)
        .filter(([status]) => !/^[23]/.test(status))
        .flatMap(([status, response]) => {
          const codes = response['x-error-codes'] ?? [];
          const examples = Object.entries(response.content?.['application/json']?.examples ?? {});
          const problems = examples.flatMap(([key, { value }]) => {
            const body = value as { status?: number; code?: string; error?: { code?: string } };
            const code = body.error ? body.error.code : body.code;
            const statusOk = body.error || status === 'default' || body.status === Number(status);
            return statusOk && code === key && codes.includes(code) ? [] : [`${key}: status ${String(body.status)}, code ${String(code)}`];
          });
          const missing = codes.filter((code) => !examples.some(([key]) => key === code));
          const faults = [...problems, ...missing.map((code) => `no example of ${code}`), ...(codes.length ? [] : ['no x-error-codes'])];
          return faults.map((fault) => `${operation.operationId} ${status}: ${fault}`);
        }),
    );
    expect(wrong).toEqual([]);
  });
});
