import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startClusterSimulator, type ClusterSimulator } from '../../dev/cluster-simulator.ts';

/**
 * The simulator's tools, structured output and completions over HTTP, as Xinference 3.2 answers
 * them with vLLM (dev/simulator/text-generation.ts names the sources): qwen2.5-instruct calls tools
 * (Qwen parser), llama-3.1-instruct too but cannot stream them (Llama 3 parser), mistral has no
 * tools, llama-3.3-instruct has the ability but no parser, codestral only generates.
 */

type Json = Record<string, unknown>;
type ToolCall = { index?: number; id?: string; type?: string; function: { name?: string; arguments?: string } };
type Message = { role: string; content: string | null; tool_calls?: ToolCall[] };
type Completion = { id: string; object: string; model: string; choices: { index: number; message: Message; finish_reason: string; logprobs?: null }[]; usage: Json };
type Chunk = { id: string; object: string; choices: { delta: Partial<Message>; finish_reason: string | null }[]; usage?: Json | null };

const ajv = new Ajv2020({ strict: false });
addFormats.default(ajv);

const WEATHER = {
  type: 'object',
  properties: {
    city: { type: 'string', minLength: 3 },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
    days: { type: 'integer', minimum: 1, maximum: 7 },
    when: { type: 'string', format: 'date-time' },
    stations: { type: 'array', items: { $ref: '#/$defs/Station' }, minItems: 1, maxItems: 3 },
    alerts: { type: 'boolean' },
  },
  required: ['city', 'days', 'stations'],
  additionalProperties: false,
  $defs: { Station: { type: 'object', properties: { id: { type: 'string' }, elevation: { type: 'number', exclusiveMinimum: 0, maximum: 5000 } }, required: ['id', 'elevation'] } },
};
const TOOLS = [
  { type: 'function', function: { name: 'get_time', description: 'The current time in a time zone', parameters: { type: 'object', properties: { zone: { type: 'string' } }, required: ['zone'] } } },
  { type: 'function', function: { name: 'get_weather', description: 'The weather forecast for a city', parameters: WEATHER } },
];
const ASK = [{ role: 'user', content: 'What will the weather be in Paris?' }];

describe('cluster simulator: tools, structured output and completions (Xinference with vLLM)', () => {
  let sim: ClusterSimulator;

  const post = (path: string, body: Json) => fetch(`${sim.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const chat = async (body: Json) => {
    const response = await post('/v1/chat/completions', { model: 'qwen', messages: ASK, ...body });
    expect(response.status).toBe(200);
    return (await response.json()) as Completion;
  };
  /** The data of each SSE event, in order (`[DONE]` as a string). */
  const events = async (response: Response): Promise<unknown[]> => {
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const text = await response.text();
    return text
      .split('\r\n\r\n')
      .filter(Boolean)
      .map((event) => event.slice('data: '.length))
      .map((data) => (data === '[DONE]' ? data : JSON.parse(data)));
  };
  const streamChat = async (body: Json) => events(await post('/v1/chat/completions', { model: 'qwen', messages: ASK, stream: true, ...body }));

  /** The tool calls of streamed deltas put together: by index, the first id, type and name, the arguments concatenated. */
  function reassemble(chunks: Chunk[]): ToolCall[] {
    const calls: ToolCall[] = [];
    for (const chunk of chunks) {
      for (const delta of chunk.choices[0]?.delta.tool_calls ?? []) {
        const call = (calls[delta.index ?? 0] ??= { function: { arguments: '' } });
        call.id ??= delta.id;
        call.type ??= delta.type;
        call.function.name ??= delta.function.name;
        call.function.arguments += delta.function.arguments ?? '';
      }
    }
    return calls;
  }

  beforeAll(async () => {
    sim = await startClusterSimulator({
      auth: false,
      workers: [{ name: 'sim-h100', gpuName: 'NVIDIA H100 80GB HBM3', gpuCount: 8, gpuMemoryGb: 80 }],
      modelLoadMs: 20,
      tokenLatencyMs: 1,
      completionTokens: 6,
    });
    const llm = { model_type: 'LLM', model_engine: 'vllm', model_format: 'pytorch', quantization: 'none', n_gpu: 1 };
    const launches = [
      { model_uid: 'qwen', model_name: 'qwen2.5-instruct', model_size_in_billions: 7 },
      { model_uid: 'llama31', model_name: 'llama-3.1-instruct', model_size_in_billions: 8 },
      { model_uid: 'llama33', model_name: 'llama-3.3-instruct', model_size_in_billions: 70, model_format: 'awq', quantization: 'Int4' },
      { model_uid: 'mistral', model_name: 'mistral-instruct-v0.3', model_size_in_billions: 7 },
      { model_uid: 'codestral', model_name: 'codestral-v0.1', model_size_in_billions: 22 },
      { model_uid: 'embed', model_name: 'bge-small-en-v1.5', model_type: 'embedding', model_engine: null, model_format: null, quantization: null, n_gpu: null },
    ];
    // wait_ready (the default) answers once the model serves.
    for (const launch of launches) expect((await post('/v1/models', { ...llm, ...launch })).status).toBe(200);
  });
  afterAll(() => sim?.stop());

  it('answers a tool-calling family one tool call, with arguments valid against the tool’s schema, content "" and finish_reason tool_calls', async () => {
    const completion = await chat({ tools: TOOLS });
    expect(completion).toMatchObject({ object: 'chat.completion', model: 'qwen', id: expect.stringMatching(/^chatcmpl-/) });
    const [choice] = completion.choices;
    expect(choice?.finish_reason).toBe('tool_calls');
    expect(choice?.message.role).toBe('assistant');
    expect(choice?.message.content).toBe('');
    expect(choice?.message.tool_calls).toEqual([{ id: expect.stringMatching(/^call_[0-9a-f-]{36}$/), type: 'function', function: { name: 'get_weather', arguments: expect.any(String) } }]);
    const args = JSON.parse(choice?.message.tool_calls?.[0]?.function.arguments ?? '') as unknown;
    const validate = ajv.compile(WEATHER);
    expect(validate(args), ajv.errorsText(validate.errors)).toBe(true);
    // Serialized as Python's json.dumps does (model/llm/utils.py, _post_process_completion).
    expect(choice?.message.tool_calls?.[0]?.function.arguments).toMatch(/^\{"city": "/);
    expect(completion.usage).toMatchObject({ completion_tokens: expect.any(Number), prompt_tokens: expect.any(Number) });

    // Deterministic: the same request, the same arguments; a named tool_choice is followed.
    expect((await chat({ tools: TOOLS })).choices[0]?.message.tool_calls?.[0]?.function.arguments).toBe(choice?.message.tool_calls?.[0]?.function.arguments);
    const named = await chat({ tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_time' } } });
    expect(named.choices[0]?.message.tool_calls?.[0]?.function).toEqual({ name: 'get_time', arguments: expect.stringMatching(/^\{"zone": "[^"]+"\}$/) });
    expect((await chat({ tools: TOOLS, tool_choice: 'required' })).choices[0]?.finish_reason).toBe('tool_calls');
  });

  it('streams a tool call as Xinference does: one delta with the whole call, then finish_reason tool_calls, the usage chunk and [DONE]; put together it is the call answered whole', async () => {
    const whole = await chat({ tools: TOOLS });
    const streamed = await streamChat({ tools: TOOLS, stream_options: { include_usage: true } });
    expect(streamed.at(-1)).toBe('[DONE]');
    const chunks = streamed.slice(0, -1) as Chunk[];
    expect(chunks.every((chunk) => chunk.object === 'chat.completion.chunk')).toBe(true);
    expect(chunks[0]?.choices[0]?.delta).toMatchObject({ role: 'assistant', tool_calls: [{ index: 0, id: expect.stringMatching(/^call_/), type: 'function', function: { name: 'get_weather' } }] });
    expect(chunks.at(-2)?.choices[0]).toMatchObject({ finish_reason: 'tool_calls', delta: { tool_calls: [] } });
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: whole.usage });
    const [call] = reassemble(chunks);
    expect(call?.function).toEqual({ name: 'get_weather', arguments: whole.choices[0]?.message.tool_calls?.[0]?.function.arguments });
  });

  it('answers a conversation that ends with the tool’s result in words, finish_reason stop and no tool calls, whole and streamed alike', async () => {
    const first = await chat({ tools: TOOLS });
    const call = first.choices[0]?.message.tool_calls?.[0] as ToolCall;
    const roundTrip = [...ASK, { role: 'assistant', content: null, tool_calls: [call] }, { role: 'tool', tool_call_id: call.id, content: '{"forecast": "sunny"}' }];
    const answer = await chat({ tools: TOOLS, messages: roundTrip });
    expect(answer.choices[0]?.finish_reason).toBe('stop');
    expect(answer.choices[0]?.message.tool_calls).toEqual([]);
    expect(answer.choices[0]?.message.content?.split(' ')).toHaveLength(6);

    const chunks = (await streamChat({ tools: TOOLS, messages: roundTrip })).slice(0, -1) as Chunk[];
    expect(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? '').join('')).toBe(answer.choices[0]?.message.content);
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('stop');
    expect(reassemble(chunks)).toEqual([]);
    // tool_choice "none": words too.
    expect((await chat({ tools: TOOLS, tool_choice: 'none' })).choices[0]).toMatchObject({ finish_reason: 'stop', message: { tool_calls: [] } });
  });

  it('answers response_format json_schema with content valid against the schema (streamed deltas concatenate to it), and json_object with an object', async () => {
    const schema = { ...WEATHER, properties: { ...WEATHER.properties, summary: { type: 'string', maxLength: 40 } } };
    const format = { type: 'json_schema', json_schema: { name: 'forecast', strict: true, schema } };
    const answer = await chat({ response_format: format });
    expect(answer.choices[0]?.finish_reason).toBe('stop');
    const content = answer.choices[0]?.message.content ?? '';
    const validate = ajv.compile(schema);
    expect(validate(JSON.parse(content)), ajv.errorsText(validate.errors)).toBe(true);
    expect(answer.usage.completion_tokens).toBeGreaterThan(6);

    const streamed = await streamChat({ response_format: format, stream_options: { include_usage: true } });
    expect(streamed.at(-1)).toBe('[DONE]');
    const chunks = streamed.slice(0, -1) as Chunk[];
    expect(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? '').join('')).toBe(content);
    expect(chunks.at(-1)?.usage).toEqual(answer.usage);

    const object = JSON.parse((await chat({ response_format: { type: 'json_object' } })).choices[0]?.message.content ?? '') as unknown;
    expect(object).toEqual({ answer: expect.any(String) });
    // With tools too, guided decoding keeps the model from writing a call.
    const both = await chat({ tools: TOOLS, response_format: format });
    expect(both.choices[0]).toMatchObject({ finish_reason: 'stop', message: { tool_calls: [] } });
    expect(validate(JSON.parse(both.choices[0]?.message.content ?? ''))).toBe(true);
    // vLLM stops a guided answer at max_tokens too.
    const cut = (await chat({ response_format: format, max_tokens: 3 })).choices[0];
    expect(cut?.finish_reason).toBe('length');
    expect(content.startsWith(cut?.message.content ?? 'x')).toBe(true);
    expect(cut?.message.content?.length).toBeLessThan(content.length);
  });

  it('refuses tools and tool results to a family outside Xinference’s tool-call families with its 400, naming those families', async () => {
    const families = /^Only \{('[^']+', )+'[^']+'\} support tool (calls|messages)$/;
    for (const model of ['mistral', 'llama33', 'codestral']) {
      const refused = await post('/v1/chat/completions', { model, messages: ASK, tools: TOOLS });
      expect(refused.status, model).toBe(400);
      const { detail } = (await refused.json()) as { detail: string };
      expect(detail).toMatch(families);
      expect(detail).toContain("'qwen2.5-instruct'");
      expect(detail).not.toContain("'llama-3.3-instruct'");
      expect(detail.endsWith('support tool calls')).toBe(true);
    }
    const toolResult = await post('/v1/chat/completions', { model: 'mistral', messages: [...ASK, { role: 'tool', tool_call_id: 'call_1', content: 'sunny' }] });
    expect(toolResult.status).toBe(400);
    expect(((await toolResult.json()) as { detail: string }).detail).toMatch(/ support tool messages$/);
    // Without tools the family answers as before.
    expect((await post('/v1/chat/completions', { model: 'mistral', messages: ASK })).status).toBe(200);
  });

  it('answers a Llama 3 tool call whole, and a streamed one with the error event its parser raises', async () => {
    const whole = (await (await post('/v1/chat/completions', { model: 'llama31', messages: ASK, tools: TOOLS })).json()) as Completion;
    expect(whole.choices[0]?.finish_reason).toBe('tool_calls');
    const streamed = await events(await post('/v1/chat/completions', { model: 'llama31', messages: ASK, tools: TOOLS, stream: true }));
    expect(streamed).toEqual([{ error: expect.stringMatching(/Llama3 does not support streaming tool call extraction\.$/) }]);
  });

  it('refuses malformed tools and response formats as pydantic does, before the model is looked up', async () => {
    const malformed = await post('/v1/chat/completions', { model: 'no-such-model', messages: ASK, tools: [{ type: 'function', function: { description: 'no name' } }] });
    expect(malformed.status).toBe(500);
    expect(await malformed.text()).toMatch(/validation error for CreateChatCompletion\ntools\.0\.function\.name\n/);
    const format = await post('/v1/chat/completions', { model: 'qwen', messages: ASK, response_format: { type: 'json_schema', json_schema: { schema: {} } } });
    expect(format.status).toBe(500);
  });

  it('serves /v1/completions as a text_completion with usage; streamed, text_completion chunks with the usage so far, the finish, the usage chunk and no [DONE]', async () => {
    const response = await post('/v1/completions', { model: 'codestral', prompt: 'def fibonacci(n):', max_tokens: 4 });
    expect(response.status).toBe(200);
    const completion = (await response.json()) as { id: string; object: string; model: string; choices: { text: string; index: number; logprobs: null; finish_reason: string }[]; usage: Json };
    expect(completion).toMatchObject({ object: 'text_completion', model: 'codestral', usage: { prompt_tokens: 2, completion_tokens: 4, total_tokens: 6 } });
    expect(completion.choices).toEqual([{ text: expect.any(String), index: 0, logprobs: null, finish_reason: 'length' }]);
    expect(completion.choices[0]?.text.split(' ')).toHaveLength(4);

    const streamed = (await events(await post('/v1/completions', { model: 'codestral', prompt: 'def fibonacci(n):', max_tokens: 4, stream: true, stream_options: { include_usage: true } }))) as {
      object: string;
      choices: { text: string; finish_reason: string | null }[];
      usage: { completion_tokens: number };
    }[];
    expect(streamed).not.toContain('[DONE]');
    expect(streamed.every((chunk) => chunk.object === 'text_completion')).toBe(true);
    expect(streamed.map((chunk) => chunk.choices[0]?.text ?? '').join('')).toBe(completion.choices[0]?.text);
    expect(streamed.slice(0, 4).map((chunk) => chunk.usage.completion_tokens)).toEqual([1, 2, 3, 4]);
    expect(streamed.at(-2)?.choices[0]).toMatchObject({ text: '', finish_reason: 'length' });
    expect(streamed.at(-1)).toMatchObject({ choices: [], usage: completion.usage });

    // A chat family on vLLM generates too (VLLMChatModel is a VLLMModel).
    expect((await post('/v1/completions', { model: 'qwen', prompt: 'Once upon a time' })).status).toBe(200);
  });

  it('refuses /v1/completions for a model without generate, and a prompt that is not a string', async () => {
    const refused = await post('/v1/completions', { model: 'embed', prompt: 'hello' });
    expect(refused.status).toBe(500);
    expect(await refused.json()).toEqual({ detail: 'Model bge-small-en-v1.5 is not for generate.' });
    expect(await events(await post('/v1/completions', { model: 'embed', prompt: 'hello', stream: true }))).toEqual([{ error: 'Model bge-small-en-v1.5 is not for generate.' }]);
    const listPrompt = await post('/v1/completions', { model: 'qwen', prompt: ['hello'] });
    expect(listPrompt.status).toBe(500);
    expect(await listPrompt.text()).toMatch(/validation error for CreateCompletionRequest\nprompt\n/);
    expect((await post('/v1/completions', { model: 'qwen', prompt: 'hello', logit_bias: { '1': 2 } })).status).toBe(501);
  });
});
