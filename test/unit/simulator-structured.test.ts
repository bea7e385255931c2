import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { describe, expect, it } from 'vitest';
import { prng } from '../../dev/simulator/seeded.ts';
import { chatRequestProblem, chooseTool, functionTools, guidedSchema, pyJson, schemaValue, tokenPieces } from '../../dev/simulator/structured.ts';

const ajv = new Ajv2020({ strict: false });
addFormats.default(ajv);

/** Schemas as clients send them: OpenAI's examples, zod-to-json-schema (Vercel AI SDK), pydantic (LangChain), draft 4 bounds. */
const SCHEMAS: Record<string, unknown> = {
  'an empty object': { type: 'object', properties: {} },
  'required and optional properties, closed': {
    type: 'object',
    properties: { city: { type: 'string', minLength: 12, maxLength: 20 }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] }, verbose: { type: 'boolean' } },
    required: ['city'],
    additionalProperties: false,
  },
  'integer and number bounds, exclusive ones and multipleOf': {
    type: 'object',
    properties: {
      days: { type: 'integer', minimum: 1, maximum: 3 },
      ratio: { type: 'number', exclusiveMinimum: 0, exclusiveMaximum: 1 },
      even: { type: 'integer', multipleOf: 2, minimum: 3, maximum: 9 },
      single: { type: 'integer', minimum: 7, maximum: 7 },
    },
    required: ['days', 'ratio', 'even', 'single'],
  },
  'string formats': {
    type: 'object',
    properties: Object.fromEntries(['date-time', 'date', 'time', 'email', 'uri', 'hostname', 'ipv4', 'uuid'].map((format) => [format, { type: 'string', format }])),
    required: ['date-time', 'date', 'time', 'email', 'uri', 'hostname', 'ipv4', 'uuid'],
  },
  'arrays: item counts, unique items, tuples': {
    type: 'object',
    properties: {
      tags: { type: 'array', items: { type: 'string' }, minItems: 3, maxItems: 4, uniqueItems: true },
      none: { type: 'array', items: { type: 'integer' }, maxItems: 0 },
      pair: { type: 'array', prefixItems: [{ type: 'string' }, { type: 'integer' }], items: false, minItems: 2 },
    },
    required: ['tags', 'none', 'pair'],
  },
  'nested objects, nullable fields, anyOf and oneOf, const': {
    type: 'object',
    properties: {
      address: { type: 'object', properties: { street: { type: 'string' }, zip: { type: ['string', 'null'] } }, required: ['street', 'zip'] },
      note: { anyOf: [{ type: 'null' }, { type: 'string', minLength: 3 }] },
      shape: { oneOf: [{ type: 'object', properties: { kind: { const: 'circle' }, radius: { type: 'number', minimum: 0 } }, required: ['kind', 'radius'] }, { type: 'string' }] },
    },
    required: ['address', 'note', 'shape'],
  },
  'pydantic $defs, $ref and allOf': {
    $defs: { Item: { type: 'object', properties: { name: { type: 'string' }, quantity: { type: 'integer', minimum: 1 } }, required: ['name', 'quantity'] } },
    type: 'object',
    properties: { items: { type: 'array', items: { $ref: '#/$defs/Item' }, minItems: 1 }, main: { allOf: [{ $ref: '#/$defs/Item' }, { properties: { gift: { type: 'boolean' } }, required: ['gift'] }] } },
    required: ['items', 'main'],
  },
  'a recursive tree': {
    $defs: { Node: { type: 'object', properties: { label: { type: 'string' }, children: { type: 'array', items: { $ref: '#/$defs/Node' } } }, required: ['label', 'children'] } },
    $ref: '#/$defs/Node',
  },
  'minProperties over additionalProperties': { type: 'object', additionalProperties: { type: 'integer' }, minProperties: 2 },
};

describe('the simulator’s schema-valid values', () => {
  it.each(Object.entries(SCHEMAS))('draws a value valid against %s, the same one for the same seed', (_name, schema) => {
    for (const seed of [1, 2, 3, 42, 1234567]) {
      const value = schemaValue(schema, prng(seed));
      const validate = ajv.compile(schema as object);
      expect(validate(value), `${JSON.stringify(value)}: ${ajv.errorsText(validate.errors)}`).toBe(true);
      expect(schemaValue(schema, prng(seed))).toEqual(value);
    }
  });

  it('fills optional properties too, ends recursion, follows draft 4 bounds, and answers json_object with an object', () => {
    const value = schemaValue(SCHEMAS['required and optional properties, closed'], prng(7)) as Record<string, unknown>;
    expect(Object.keys(value)).toEqual(['city', 'unit', 'verbose']);
    expect(JSON.stringify(schemaValue(SCHEMAS['a recursive tree'], prng(7))).length).toBeLessThan(100_000);
    // Draft 4's boolean exclusive bounds (which a 2020-12 validator refuses as a schema).
    for (const seed of [1, 2, 3]) {
      const value = schemaValue({ type: 'number', minimum: 5, exclusiveMinimum: true, maximum: 6, exclusiveMaximum: true }, prng(seed)) as number;
      expect(value > 5 && value < 6, String(value)).toBe(true);
    }
    expect(schemaValue(guidedSchema({ type: 'json_object' }), prng(7))).toEqual({ answer: expect.any(String) });
    expect(guidedSchema({ type: 'json_schema', json_schema: { name: 'empty', schema: {} } })).toEqual(guidedSchema({ type: 'json_object' }));
    // A json_schema without a schema guides nothing (model/llm/vllm/core.py, _sanitize_generate_config).
    expect(guidedSchema({ type: 'json_schema', json_schema: { name: 'none' } })).toBeUndefined();
    expect(guidedSchema({ type: 'text' })).toBeUndefined();
  });
});

describe('the simulated model’s text', () => {
  it('writes JSON as Python’s json.dumps does', () => {
    expect(pyJson({ city: 'Zürich', days: [1, 2], nested: { ok: true, none: null } })).toBe('{"city": "Zürich", "days": [1, 2], "nested": {"ok": true, "none": null}}');
  });

  it('cuts text into token pieces that join back to it', () => {
    const text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>  ';
    const pieces = tokenPieces(text);
    expect(pieces.join('')).toBe(text);
    expect(pieces.slice(0, 4)).toEqual(['<', 'tool_call', '>', '\n{']);
  });

  it('calls the named tool, the one the prompt speaks of, or none when told so', () => {
    const tools = functionTools([
      { type: 'function', function: { name: 'get_time', description: 'The current time in a time zone' } },
      { type: 'function', function: { name: 'getWeather', description: 'Weather forecast for a city' } },
    ]);
    expect(tools[0]?.parameters).toEqual({ type: 'object', properties: {} });
    expect(chooseTool(tools, 'auto', 'What is the weather in Paris?')?.name).toBe('getWeather');
    expect(chooseTool(tools, 'required', 'Which time zone is Paris in?')?.name).toBe('get_time');
    expect(chooseTool(tools, undefined, 'Hello')?.name).toBe('get_time');
    expect(chooseTool(tools, { type: 'function', function: { name: 'get_time' } }, 'What is the weather in Paris?')?.name).toBe('get_time');
    expect(chooseTool(tools, 'none', 'What is the weather in Paris?')).toBeUndefined();
  });

  it('finds the fields pydantic would refuse in tools, tool_choice and response_format', () => {
    expect(chatRequestProblem({ tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: 'auto', response_format: { type: 'json_object' } })).toBeUndefined();
    expect(chatRequestProblem({ tools: [{ type: 'function', function: {} }] })?.field).toBe('tools.0.function.name');
    expect(chatRequestProblem({ tools: [{ type: 'retrieval' }] })?.field).toBe('tools.0.type');
    expect(chatRequestProblem({ tool_choice: 'always' })?.field).toBe('tool_choice');
    expect(chatRequestProblem({ response_format: { type: 'json_schema', json_schema: { schema: {} } } })?.field).toBe('response_format.json_schema.name');
    expect(chatRequestProblem({ response_format: { type: 'yaml' } })?.field).toBe('response_format');
  });
});
