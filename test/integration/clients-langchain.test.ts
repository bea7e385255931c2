import { AIMessage, HumanMessage, type AIMessageChunk, type BaseMessage } from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { ChatOpenAI, OpenAIEmbeddings } from '@langchain/openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  answerOf,
  cityFacts,
  eventsOf,
  lastExchange,
  meteredUsage,
  MODELS,
  relayedToolCalls,
  ROUTES,
  startClientWorld,
  WEATHER_TOOL,
  weatherArguments,
  type ChatCompletion,
  type ClientWorld,
  type EmbeddingList,
  type MeteredTokens,
} from '../helpers/client-contract.ts';

/**
 * LangChain's OpenAI package (`ChatOpenAI`, `OpenAIEmbeddings`, on the official openai SDK)
 * through the gateway to the cluster simulator: invoke, stream with usage
 * metadata, tools bound and called, structured output, embeddings, each checked against what the
 * gateway relayed and metered.
 */

let world: ClientWorld;
let key: string;

/** No retries: a failed answer fails the test instead of being asked again. */
const chatModel = (apiKey = key) => new ChatOpenAI({ model: MODELS.chat, apiKey, maxRetries: 0, configuration: { baseURL: world.baseURL, fetch: world.fetch } });
const usageOf = (row: MeteredTokens | undefined) => ({
  input_tokens: row?.prompt_tokens,
  output_tokens: row?.completion_tokens,
  total_tokens: row?.total_tokens,
});
const weather = tool(async (input) => JSON.stringify({ temperature: 21, unit: input.unit }), { ...WEATHER_TOOL, schema: weatherArguments });

beforeAll(async () => {
  world = await startClientWorld(['chat', 'embedding']);
  key = (await world.newKey()).key;
}, 120_000);
afterAll(() => world?.close());

describe('ChatOpenAI', () => {
  it('invoke answers an AIMessage with the usage the gateway metered and the model name asked for', async () => {
    const { key, id } = await world.newKey();
    const answer = await chatModel(key).invoke('Say hello');
    expect(answer.content).toMatch(/\w/);
    expect(answer.response_metadata.finish_reason).toBe('stop');
    const [metered] = await meteredUsage(world, id);
    expect(answer.usage_metadata).toMatchObject(usageOf(metered));
    expect(answer.response_metadata.model_name).toBe(MODELS.chat);
  });

  it('stream yields the text chunk by chunk, and usage metadata from the stream’s usage chunk', async () => {
    const { key, id } = await world.newKey();
    let joined: AIMessageChunk | undefined;
    for await (const chunk of await chatModel(key).stream('Tell me a story')) joined = joined ? joined.concat(chunk) : chunk;
    expect(joined?.content).toMatch(/\w+( \w+)+/);
    const exchange = lastExchange(world, ROUTES.chat);
    expect(exchange.sent.stream_options).toEqual({ include_usage: true });
    expect((await eventsOf(exchange)).at(-1)?.usage).toBeTruthy();
    const [metered] = await meteredUsage(world, id);
    expect(joined?.usage_metadata).toMatchObject(usageOf(metered));
    expect(joined?.response_metadata.model_name).toBe(MODELS.chat);
  });

  it('bindTools: the model’s tool call arrives parsed as relayed, the tool’s answer goes back, and the model answers text', async () => {
    const model = chatModel().bindTools([weather]);
    const messages: BaseMessage[] = [new HumanMessage('What is the weather in Paris?')];
    const asked = await model.invoke(messages);
    const relayed = relayedToolCalls(await answerOf<ChatCompletion>(lastExchange(world, ROUTES.chat)));
    expect(asked.response_metadata.finish_reason).toBe('tool_calls');
    expect(asked.tool_calls?.map((call) => ({ id: call.id, name: call.name, arguments: call.args }))).toEqual(relayed);
    expect(weatherArguments.safeParse(asked.tool_calls?.[0]?.args).success).toBe(true);

    const [call] = asked.tool_calls ?? [];
    if (!call) throw new Error('no tool call');
    messages.push(asked, await weather.invoke({ ...call, type: 'tool_call' }));
    const answered = await model.invoke(messages);
    expect(lastExchange(world, ROUTES.chat).sent.messages).toContainEqual(expect.objectContaining({ role: 'tool', tool_call_id: call.id }));
    expect(answered).toBeInstanceOf(AIMessage);
    expect(answered.tool_calls ?? []).toEqual([]);
    expect(answered.content).toMatch(/\w/);
  });

  it('withStructuredOutput (jsonSchema) asks for json_schema and answers the object relayed, valid against the schema', async () => {
    const structured = chatModel().withStructuredOutput(cityFacts, { method: 'jsonSchema', name: 'city_facts' });
    const facts = await structured.invoke('Facts about Lisbon');
    const exchange = lastExchange(world, ROUTES.chat);
    expect(exchange.sent.response_format).toMatchObject({ type: 'json_schema', json_schema: { name: 'city_facts' } });
    expect(facts).toEqual(JSON.parse((await answerOf<ChatCompletion>(exchange)).choices[0]?.message.content ?? ''));
    expect(cityFacts.safeParse(facts).success).toBe(true);
  });
});

describe('OpenAIEmbeddings', () => {
  it('embedQuery and embedDocuments decode the base64 the openai SDK asks for into the vectors relayed', async () => {
    const embeddings = new OpenAIEmbeddings({ model: MODELS.embedding, apiKey: key, maxRetries: 0, configuration: { baseURL: world.baseURL, fetch: world.fetch } });
    const query = await embeddings.embedQuery('sunny day at the beach');
    expect(query).toEqual(await relayedVectors().then((vectors) => vectors[0]));
    const documents = await embeddings.embedDocuments(['rainy day in the city', 'snow in the mountains']);
    expect(documents).toEqual(await relayedVectors());
    expect(documents).toHaveLength(2);
  });
});

/** The vectors of the last embeddings answer relayed, decoded from the base64 of little-endian float32 it carried. */
async function relayedVectors(): Promise<number[][]> {
  const exchange = lastExchange(world, ROUTES.embeddings);
  expect(exchange.sent.encoding_format).toBe('base64');
  return (await answerOf<EmbeddingList>(exchange)).data.map((item) => {
    const bytes = Buffer.from(item.embedding as string, 'base64');
    return Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
  });
}
