import { createOpenAI, type OpenAIProvider } from '@ai-sdk/openai';
import { embed, embedMany, generateText, isStepCount, Output, streamText, tool } from 'ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  answerOf,
  cityFacts,
  eventsOf,
  exchangesOn,
  lastExchange,
  meteredUsage,
  MODELS,
  relayedToolCalls,
  ROUTES,
  startClientWorld,
  streamedToolCalls,
  WEATHER_TOOL,
  weatherArguments,
  type ChatCompletion,
  type ClientWorld,
  type EmbeddingList,
  type MeteredTokens,
} from '../helpers/client-contract.ts';

/**
 * The Vercel AI SDK (`ai` with the `@ai-sdk/openai` provider) through the gateway to the cluster
 * simulator: text, streams with usage, tool calls over several steps,
 * structured output and embeddings, each checked against what the gateway relayed and metered.
 * The provider's `openai(modelId)` speaks OpenAI's Responses API, which the gateway does not
 * serve; `openai.chat(modelId)` speaks chat completions, as an OpenAI-compatible server needs.
 */

let world: ClientWorld;
let openai: OpenAIProvider;

/** A provider on the gateway with a key of its own (to find its usage), every exchange recorded. */
const provider = (apiKey: string) => createOpenAI({ baseURL: world.baseURL, apiKey, fetch: world.fetch });
/** No retries: a failed answer fails the test instead of being asked again. */
const once = { maxRetries: 0 } as const;
const usageOf = (row: MeteredTokens | undefined) => ({
  inputTokens: row?.prompt_tokens,
  outputTokens: row?.completion_tokens,
  totalTokens: row?.total_tokens,
});

/** The tool the model is offered: each call the SDK runs is kept in `calls`. */
function weatherTool(calls: unknown[]) {
  return tool({
    description: WEATHER_TOOL.description,
    inputSchema: weatherArguments,
    execute: async (input) => {
      calls.push(input);
      return { temperature: 21, unit: input.unit };
    },
  });
}

beforeAll(async () => {
  world = await startClientWorld(['chat', 'embedding']);
  openai = provider((await world.newKey()).key);
}, 120_000);
afterAll(() => world?.close());

describe('text', () => {
  it('generateText answers text with the usage the gateway metered, and the model id asked for', async () => {
    const { key, id } = await world.newKey();
    const result = await generateText({ ...once, model: provider(key).chat(MODELS.chat), prompt: 'Say hello' });
    expect(result.finishReason).toBe('stop');
    expect(result.text).toMatch(/\w/);
    const [metered] = await meteredUsage(world, id);
    expect(result.usage).toMatchObject(usageOf(metered));
    expect(result.response.modelId).toBe(MODELS.chat);
  });

  it('streamText streams the text and reports the usage of the stream’s last chunk', async () => {
    const { key, id } = await world.newKey();
    const result = streamText({ ...once, model: provider(key).chat(MODELS.chat), prompt: 'Tell me a story' });
    let text = '';
    for await (const piece of result.textStream) text += piece;
    expect(text).toMatch(/\w+( \w+)+/);
    expect(await result.finishReason).toBe('stop');
    const exchange = lastExchange(world, ROUTES.chat);
    expect(exchange.sent.stream_options).toEqual({ include_usage: true });
    expect((await eventsOf(exchange)).at(-1)?.usage).toBeTruthy();
    const [metered] = await meteredUsage(world, id);
    expect(await result.usage).toMatchObject(usageOf(metered));
    expect((await result.response).modelId).toBe(MODELS.chat);
  });
});

describe('tools', () => {
  it('generateText runs the tool the model called, with the arguments relayed, and the next step answers text', async () => {
    const { key, id } = await world.newKey();
    const calls: unknown[] = [];
    const result = await generateText({
      ...once,
      model: provider(key).chat(MODELS.chat),
      tools: { [WEATHER_TOOL.name]: weatherTool(calls) },
      stopWhen: isStepCount(3),
      prompt: 'What is the weather in Paris?',
    });
    const [first, second, ...more] = result.steps;
    expect([first?.finishReason, second?.finishReason, more.length]).toEqual(['tool-calls', 'stop', 0]);
    const [call] = first?.toolCalls ?? [];
    const relayed = relayedToolCalls(await answerOf<ChatCompletion>(exchangesOn(world, ROUTES.chat).at(-2)));
    expect(relayed).toEqual([{ id: call?.toolCallId, name: WEATHER_TOOL.name, arguments: call?.input }]);
    expect(calls).toEqual([call?.input]);
    // The tool's result went back to the model as a `tool` message answering the call.
    const { sent } = lastExchange(world, ROUTES.chat);
    expect(sent.messages).toContainEqual(expect.objectContaining({ role: 'tool', tool_call_id: call?.toolCallId }));
    expect(result.text).toMatch(/\w/);
    const metered = await meteredUsage(world, id);
    expect(result.steps.map((step) => step.usage)).toEqual(metered.map((row) => expect.objectContaining(usageOf(row))));
  });

  it('streamText joins the streamed tool-call deltas into the call relayed, runs it, and streams the final text', async () => {
    const calls: unknown[] = [];
    const result = streamText({
      ...once,
      model: openai.chat(MODELS.chat),
      tools: { [WEATHER_TOOL.name]: weatherTool(calls) },
      stopWhen: isStepCount(3),
      prompt: 'What is the weather in Oslo?',
    });
    let text = '';
    for await (const piece of result.textStream) text += piece;
    const steps = await result.steps;
    expect(steps.map((step) => step.finishReason)).toEqual(['tool-calls', 'stop']);
    const [call] = steps[0]?.toolCalls ?? [];
    const events = await eventsOf(exchangesOn(world, ROUTES.chat).at(-2));
    expect(streamedToolCalls(events)).toEqual([{ id: call?.toolCallId, name: WEATHER_TOOL.name, arguments: call?.input }]);
    expect(calls).toEqual([call?.input]);
    expect(text).toMatch(/\w/);
  });
});

describe('structured output', () => {
  it('generateText with Output.object asks for json_schema and parses the answer with the zod schema', async () => {
    const result = await generateText({ ...once, model: openai.chat(MODELS.chat), output: Output.object({ schema: cityFacts }), prompt: 'Facts about Lisbon' });
    const exchange = lastExchange(world, ROUTES.chat);
    expect(exchange.sent.response_format).toMatchObject({ type: 'json_schema', json_schema: { strict: true } });
    expect(result.output).toEqual(JSON.parse((await answerOf<ChatCompletion>(exchange)).choices[0]?.message.content ?? ''));
    expect(cityFacts.safeParse(result.output).success).toBe(true);
  });
});

describe('embeddings', () => {
  it('embed and embedMany answer the vectors relayed, with the tokens the gateway metered', async () => {
    const { key, id } = await world.newKey();
    const model = provider(key).embedding(MODELS.embedding);
    const one = await embed({ ...once, model, value: 'sunny day at the beach' });
    const relayedOne = await answerOf<EmbeddingList>(lastExchange(world, ROUTES.embeddings));
    expect(one.embedding).toEqual(relayedOne.data[0]?.embedding);
    const many = await embedMany({ ...once, model, values: ['rainy day in the city', 'snow in the mountains'] });
    const relayedMany = await answerOf<EmbeddingList>(lastExchange(world, ROUTES.embeddings));
    expect(many.embeddings).toEqual(relayedMany.data.map((item) => item.embedding));
    const metered = await meteredUsage(world, id);
    expect([one.usage.tokens, many.usage.tokens]).toEqual(metered.map((row) => row.total_tokens));
  });
});
