import { isRecord } from './http.ts';
import { word } from './seeded.ts';

/**
 * What a simulated model writes when the request constrains its output: a tool call, or a JSON
 * document a schema allows. Pure functions; `generation.ts` answers with them.
 *
 * A real model on vLLM writes the JSON under guided decoding (`response_format`) or as its chat
 * template teaches it (tools); the simulator writes a deterministic value that is valid against
 * the schema instead: objects with their properties (required ones always), strings (with their
 * length bounds and common formats), numbers and integers within their bounds and `multipleOf`,
 * booleans, `enum` and `const`, arrays within their item counts (tuples too), `anyOf`/`oneOf`
 * (the first branch that is not null), `allOf` (merged) and local `$ref`s (`#/$defs/…`,
 * recursion cut at a depth). `pattern` is not followed.
 */

/** A function the request offers the model (`tools[].function`). */
export interface FunctionTool {
  name: string;
  description: string;
  parameters: unknown;
}

/** A field of the request pydantic would refuse (`CreateChatCompletion`), and why. */
export interface RequestProblem {
  field: string;
  problem: string;
}

const NOT_A_DICT = 'Input should be a valid dictionary [type=dict_type]';
const MISSING = 'Field required [type=missing]';

/**
 * The first malformed tool or response format, as the request's pydantic model
 * (`xinference/_compat.py`, `CreateChatCompletionOpenAI`: `tools` are OpenAI's
 * `ChatCompletionToolParam`s, `tool_choice` "none", "auto", "required" or a named function,
 * `response_format` one of text, json_object and json_schema, whose `json_schema` needs a `name`)
 * refuses it before the handler runs; undefined when they parse.
 */
export function chatRequestProblem(body: Record<string, unknown>): RequestProblem | undefined {
  const { tools, tool_choice: toolChoice, response_format: format } = body;
  if (tools !== undefined && tools !== null) {
    if (!Array.isArray(tools)) return { field: 'tools', problem: 'Input should be iterable [type=iterable_type]' };
    for (const [index, tool] of tools.entries()) {
      if (!isRecord(tool)) return { field: `tools.${index}`, problem: NOT_A_DICT };
      if (tool.type !== 'function') return { field: `tools.${index}.type`, problem: "Input should be 'function' [type=literal_error]" };
      if (!isRecord(tool.function)) return { field: `tools.${index}.function`, problem: tool.function === undefined ? MISSING : NOT_A_DICT };
      if (typeof tool.function.name !== 'string') return { field: `tools.${index}.function.name`, problem: MISSING };
    }
  }
  if (toolChoice !== undefined && toolChoice !== null && !['none', 'auto', 'required'].includes(toolChoice as string)) {
    if (!isRecord(toolChoice) || toolChoice.type !== 'function' || !isRecord(toolChoice.function) || typeof toolChoice.function.name !== 'string') {
      return { field: 'tool_choice', problem: "Input should be 'none', 'auto', 'required' or a named function [type=union_tag_invalid]" };
    }
  }
  if (format !== undefined && format !== null) {
    if (!isRecord(format) || !['text', 'json_object', 'json_schema'].includes(format.type as string)) {
      return { field: 'response_format', problem: "Input should be a text, json_object or json_schema format [type=union_tag_invalid]" };
    }
    if (format.type === 'json_schema') {
      if (!isRecord(format.json_schema)) return { field: 'response_format.json_schema', problem: format.json_schema === undefined ? MISSING : NOT_A_DICT };
      if (typeof format.json_schema.name !== 'string') return { field: 'response_format.json_schema.name', problem: MISSING };
    }
  }
  return undefined;
}

/** The functions of a request's `tools` (already checked by `chatRequestProblem`). */
export function functionTools(tools: unknown): FunctionTool[] {
  if (!Array.isArray(tools)) return [];
  return tools.flatMap((tool) => {
    if (!isRecord(tool) || !isRecord(tool.function) || typeof tool.function.name !== 'string') return [];
    const { name, description, parameters } = tool.function;
    return [{ name, description: typeof description === 'string' ? description : '', parameters: parameters ?? { type: 'object', properties: {} } }];
  });
}

/** What `json_object` asks for: any JSON object; the simulated model writes one with an answer in it. */
const ANY_OBJECT = { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] };

/**
 * The schema guided decoding holds the answer to, or undefined when it is free text
 * (`model/llm/vllm/core.py`, `_sanitize_generate_config`: `json_object` becomes
 * `guided_json_object`, `json_schema` its `schema` as `guided_json`, handed to vLLM's
 * `GuidedDecodingParams`/`StructuredOutputsParams`; a `json_schema` without a schema guides
 * nothing). Undefined too for `text`.
 */
export function guidedSchema(format: unknown): unknown {
  if (!isRecord(format)) return undefined;
  if (format.type === 'json_object') return ANY_OBJECT;
  if (format.type !== 'json_schema' || !isRecord(format.json_schema)) return undefined;
  const schema = format.json_schema.schema ?? undefined;
  // An empty schema allows any JSON; the simulated model still answers an object.
  return isRecord(schema) && Object.keys(schema).length === 0 ? ANY_OBJECT : schema;
}

/** Words too common to tell one tool from another. */
const COMMON = new Set(['the', 'and', 'for', 'with', 'what', 'this', 'that', 'from', 'get', 'set', 'use', 'tool', 'function', 'call']);

function keywords(text: string): string[] {
  return text
    .replace(/([a-z])([A-Z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter((w) => w.length > 2 && !COMMON.has(w));
}

/**
 * The tool the simulated model calls, or undefined when it answers in words. Xinference hands
 * `tools` to the chat template only and does not enforce `tool_choice` (`model/llm/vllm/core.py`,
 * `async_chat`: no guided decoding for it); the simulated model follows it as a well-behaved model
 * does: "none" answers in words, a named function is called, and "auto" or "required" call the
 * tool whose name and description share most words with the prompt (the first on a tie).
 */
export function chooseTool(tools: FunctionTool[], toolChoice: unknown, prompt: string): FunctionTool | undefined {
  if (toolChoice === 'none' || tools.length === 0) return undefined;
  if (isRecord(toolChoice) && isRecord(toolChoice.function)) {
    const named = tools.find((tool) => tool.name === (toolChoice.function as Record<string, unknown>).name);
    if (named) return named;
  }
  const asked = new Set(keywords(prompt));
  let best = tools[0];
  let bestScore = -1;
  for (const tool of tools) {
    const score = keywords(`${tool.name} ${tool.description}`).filter((w) => asked.has(w)).length;
    if (score > bestScore) [best, bestScore] = [tool, score];
  }
  return best;
}

/**
 * The model's own text for a tool call, in the Qwen format that `model/llm/tool_parsers/qwen_tool_parser.py`
 * reads (`<tool_call>{"name": …, "arguments": …}</tool_call>`): what its completion tokens count.
 */
export function toolCallText(name: string, args: unknown): string {
  return `<tool_call>\n${pyJson({ name, arguments: args })}\n</tool_call>`;
}

/**
 * JSON as Python's `json.dumps` writes it (`", "` and `": "` between items, non-ASCII kept), which
 * is how Xinference serializes tool call arguments (`model/llm/utils.py`, `_post_process_completion`).
 */
export function pyJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(pyJson).join(', ')}]`;
  if (isRecord(value)) return `{${Object.entries(value).map(([key, item]) => `${JSON.stringify(key)}: ${pyJson(item)}`).join(', ')}}`;
  return JSON.stringify(value) ?? 'null';
}

/** Model text cut into token-sized pieces (a word or one symbol, with the spaces before it); they join back to the text. */
export function tokenPieces(text: string): string[] {
  return text.match(/\s*[\p{L}\p{N}_]+|\s*[^\s\p{L}\p{N}_]|\s+$/gu) ?? [];
}

/** Beyond this depth objects keep only their required properties and arrays their minimum items, so recursive schemas end. */
const MAX_DEPTH = 6;

/** A deterministic value valid against `schema` (see the file comment for what is followed), drawn with `random`. */
export function schemaValue(schema: unknown, random: () => number): unknown {
  const root = schema;

  function resolve(node: unknown): unknown {
    let current = node;
    for (let hops = 0; hops < 32 && isRecord(current) && typeof current.$ref === 'string'; hops++) {
      const { $ref: ref, ...siblings } = current;
      const target = pointer(root, ref as string);
      current = isRecord(target) ? { ...target, ...siblings } : siblings;
    }
    return current;
  }

  /** The schema with its `allOf` parts merged in: properties joined, required names united. */
  function flatten(node: Record<string, unknown>): Record<string, unknown> {
    if (!Array.isArray(node.allOf)) return node;
    const { allOf, ...own } = node;
    let out: Record<string, unknown> = own;
    for (const part of allOf as unknown[]) {
      const resolved = resolve(part);
      if (!isRecord(resolved)) continue;
      const next = flatten(resolved);
      out = {
        ...out,
        ...next,
        properties: { ...(isRecord(out.properties) ? out.properties : {}), ...(isRecord(next.properties) ? next.properties : {}) },
        required: [...new Set([...strings(out.required), ...strings(next.required)])],
      };
    }
    return out;
  }

  function value(node: unknown, depth: number): unknown {
    const resolved = resolve(node);
    if (!isRecord(resolved)) return resolved === false ? null : words(2);
    const s = flatten(resolved);
    if ('const' in s) return s.const;
    if (Array.isArray(s.enum) && s.enum.length > 0) return s.enum[Math.floor(random() * s.enum.length)];
    const branches = Array.isArray(s.anyOf) ? s.anyOf : Array.isArray(s.oneOf) ? s.oneOf : undefined;
    if (branches && branches.length > 0) {
      const { anyOf: _any, oneOf: _one, ...rest } = s;
      const branch = branches.find((b) => typeOf(resolve(b)) !== 'null') ?? branches[0];
      const picked = resolve(branch);
      return value(isRecord(picked) ? { ...rest, ...picked } : picked, depth);
    }
    switch (typeOf(s)) {
      case 'object':
        return object(s, depth);
      case 'array':
        return array(s, depth);
      case 'integer':
        return number(s, true);
      case 'number':
        return number(s, false);
      case 'boolean':
        return random() < 0.5;
      case 'null':
        return null;
      default:
        return string(s);
    }
  }

  function object(s: Record<string, unknown>, depth: number): Record<string, unknown> {
    const properties = isRecord(s.properties) ? s.properties : {};
    const required = strings(s.required);
    const names = depth >= MAX_DEPTH ? required : [...new Set([...Object.keys(properties), ...required])];
    const limit = Math.max(required.length, typeof s.maxProperties === 'number' ? s.maxProperties : Infinity);
    const kept = [...required, ...names.filter((name) => !required.includes(name))].slice(0, limit);
    const extra = isRecord(s.additionalProperties) ? s.additionalProperties : {};
    const out: Record<string, unknown> = {};
    for (const name of names) if (kept.includes(name)) out[name] = value(properties[name] ?? extra, depth + 1);
    const minimum = typeof s.minProperties === 'number' ? s.minProperties : 0;
    for (let i = 1; Object.keys(out).length < minimum && s.additionalProperties !== false; i++) out[`field_${i}`] ??= value(extra, depth + 1);
    return out;
  }

  function array(s: Record<string, unknown>, depth: number): unknown[] {
    const minimum = typeof s.minItems === 'number' ? s.minItems : 0;
    const maximum = typeof s.maxItems === 'number' ? s.maxItems : Infinity;
    const tuple = Array.isArray(s.prefixItems) ? s.prefixItems : Array.isArray(s.items) ? s.items : [];
    const rest = Array.isArray(s.prefixItems) ? s.items : Array.isArray(s.items) ? s.additionalItems : s.items;
    const wanted = depth >= MAX_DEPTH ? minimum : Math.max(minimum, tuple.length || 2);
    const count = Math.max(minimum, Math.min(wanted, maximum));
    const out: unknown[] = [];
    const seen = new Set<string>();
    for (let attempt = 0; out.length < count && attempt < count * 8; attempt++) {
      const item = value(out.length < tuple.length ? tuple[out.length] : (rest ?? {}), depth + 1);
      const key = JSON.stringify(item);
      // uniqueItems: draw again; a schema with too few distinct values ends with fewer items.
      if (s.uniqueItems === true && seen.has(key)) continue;
      seen.add(key);
      out.push(item);
    }
    return out;
  }

  function number(s: Record<string, unknown>, integer: boolean): number {
    let low = typeof s.minimum === 'number' ? s.minimum : undefined;
    let high = typeof s.maximum === 'number' ? s.maximum : undefined;
    // Draft 6 and later: exclusive bounds are numbers; draft 4: booleans beside minimum/maximum.
    let lowExclusive = s.exclusiveMinimum === true;
    let highExclusive = s.exclusiveMaximum === true;
    if (typeof s.exclusiveMinimum === 'number' && (low === undefined || s.exclusiveMinimum >= low)) [low, lowExclusive] = [s.exclusiveMinimum, true];
    if (typeof s.exclusiveMaximum === 'number' && (high === undefined || s.exclusiveMaximum <= high)) [high, highExclusive] = [s.exclusiveMaximum, true];
    if (low === undefined && high === undefined) [low, high] = [1, 100];
    low ??= (high as number) - 100;
    high ??= low + 100;
    const step = typeof s.multipleOf === 'number' && s.multipleOf > 0 ? s.multipleOf : integer ? 1 : undefined;
    if (step !== undefined) {
      let first = Math.ceil(low / step);
      let last = Math.floor(high / step);
      if (lowExclusive && first * step <= low) first++;
      if (highExclusive && last * step >= high) last--;
      const k = first > last ? first : first + Math.floor(random() * (last - first + 1));
      return Number((k * step).toPrecision(12));
    }
    const drawn = Math.round((low + random() * (high - low)) * 100) / 100;
    const inside = drawn >= low && drawn <= high && !(lowExclusive && drawn <= low) && !(highExclusive && drawn >= high);
    return inside ? drawn : (low + high) / 2;
  }

  function string(s: Record<string, unknown>): string {
    let out = formatted(s.format) ?? words(1 + Math.floor(random() * 3));
    const minimum = typeof s.minLength === 'number' ? s.minLength : 0;
    const maximum = typeof s.maxLength === 'number' ? s.maxLength : Infinity;
    while (out.length < minimum) out += ` ${word(random)}`;
    return out.length > maximum ? out.slice(0, maximum) : out;
  }

  function formatted(format: unknown): string | undefined {
    const n = (size: number) => Math.floor(random() * size);
    const pad = (value: number) => String(value).padStart(2, '0');
    switch (format) {
      case 'date-time':
        return `2026-${pad(1 + n(12))}-${pad(1 + n(28))}T${pad(n(24))}:${pad(n(60))}:00Z`;
      case 'date':
        return `2026-${pad(1 + n(12))}-${pad(1 + n(28))}`;
      case 'time':
        return `${pad(n(24))}:${pad(n(60))}:00Z`;
      case 'email':
        return `${word(random)}@example.com`;
      case 'uri':
      case 'url':
        return `https://example.com/${word(random)}`;
      case 'hostname':
        return `${word(random)}.example.com`;
      case 'ipv4':
        return `192.0.2.${1 + n(254)}`;
      case 'uuid':
        return Array.from({ length: 32 }, (_, i) => (i === 12 ? '4' : i === 16 ? '8' : n(16).toString(16)))
          .join('')
          .replace(/^(.{8})(.{4})(.{4})(.{4})/, '$1-$2-$3-$4-');
      default:
        return undefined;
    }
  }

  function words(count: number): string {
    return Array.from({ length: count }, () => word(random)).join(' ');
  }

  return value(schema, 0);
}

/** The JSON type a schema asks for: its `type` (the first that is not null), else what its keywords imply. */
function typeOf(schema: unknown): string | undefined {
  if (!isRecord(schema)) return undefined;
  const { type } = schema;
  if (typeof type === 'string') return type;
  if (Array.isArray(type)) return (type.find((t) => t !== 'null') ?? type[0]) as string | undefined;
  if ('properties' in schema || 'required' in schema || 'additionalProperties' in schema) return 'object';
  if ('items' in schema || 'prefixItems' in schema) return 'array';
  if (['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf'].some((key) => key in schema)) return 'number';
  return undefined;
}

function strings(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((item): item is string => typeof item === 'string') : [];
}

/** A local JSON pointer (`#/$defs/Item`) into the root schema; undefined for any other reference. */
function pointer(root: unknown, ref: string): unknown {
  if (!ref.startsWith('#')) return undefined;
  let node = root;
  for (const raw of ref.slice(1).split('/').slice(1)) {
    const key = decodeURIComponent(raw).replaceAll('~1', '/').replaceAll('~0', '~');
    node = isRecord(node) ? node[key] : Array.isArray(node) ? node[Number(key)] : undefined;
  }
  return node;
}
