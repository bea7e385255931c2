import type OpenAI from 'openai';
import { AuthenticationError, BadRequestError, NotFoundError, RateLimitError, toFile, type APIError } from 'openai';
import { zodFunction, zodResponseFormat } from 'openai/helpers/zod';
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
  streamedToolCalls,
  WEATHER_TOOL,
  weatherArguments,
  type ChatCompletion,
  type ClientWorld,
  type EmbeddingList,
} from '../helpers/client-contract.ts';
import { inferenceClient } from '../helpers/inference-client.ts';

/**
 * The official `openai` SDK's everyday calls through the gateway to the cluster simulator, over
 * HTTP on loopback: what a customer's code does, and that the SDK reads each
 * answer as the gateway relayed it (the arguments it parses, the usage it reports, the model it
 * names). The Vercel AI SDK and LangChain have suites of their own beside this one.
 */

let world: ClientWorld;
let key: string;

/** The SDK with the world's key (or `apiKey`), every exchange recorded; no retries unless asked. */
const sdk = (apiKey = key, maxRetries = 0) => inferenceClient(world.app, apiKey, { fetch: world.fetch, maxRetries });
const ask = (content: string) => [{ role: 'user' as const, content }];
const weatherTool = zodFunction({ ...WEATHER_TOOL, parameters: weatherArguments });
/** Requests of the chat route that reached the engine. */
const engineChats = () => world.app.simulator?.requests['POST /v1/chat/completions'] ?? 0;

beforeAll(async () => {
  world = await startClientWorld(['chat', 'chatWithoutTools', 'embedding', 'rerank', 'image', 'audio']);
  key = (await world.newKey()).key;
}, 120_000);
afterAll(() => world?.close());

describe('chat', () => {
  it('answers text with the usage the gateway metered, naming the model asked for', async () => {
    const { key, id } = await world.newKey();
    const answer = await sdk(key).chat.completions.create({ model: MODELS.chat, messages: ask('Say hello') });
    expect(answer.choices[0]?.finish_reason).toBe('stop');
    expect(answer.choices[0]?.message.content).toEqual(expect.stringMatching(/\w/));
    const [metered] = await meteredUsage(world, id);
    expect(answer.usage).toMatchObject(metered ?? {});
    expect(answer.model).toBe(MODELS.chat);
  });

  it('streams chunk by chunk, the usage in a last chunk without choices when include_usage is asked', async () => {
    const { key, id } = await world.newKey();
    const stream = await sdk(key).chat.completions.create({ model: MODELS.chat, messages: ask('Tell me a story'), stream: true, stream_options: { include_usage: true } });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    const last = chunks.at(-1);
    expect(last?.choices).toEqual([]);
    expect(chunks.slice(0, -1).every((chunk) => !chunk.usage)).toBe(true);
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe('stop');
    expect(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? '').join('')).toMatch(/\w+( \w+)+/);
    const [metered] = await meteredUsage(world, id);
    expect(last?.usage).toMatchObject(metered ?? {});
    expect(new Set(chunks.map((chunk) => chunk.model))).toEqual(new Set([MODELS.chat]));
  });

  it('makes a tool round trip: the model calls the tool, the caller answers with a tool message, the model answers text', async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = ask('What is the weather in Paris?');
    const first = await sdk().chat.completions.parse({ model: MODELS.chat, messages, tools: [weatherTool] });
    const relayed = relayedToolCalls(await answerOf<ChatCompletion>(lastExchange(world, ROUTES.chat)));
    expect(first.choices[0]?.finish_reason).toBe('tool_calls');
    const message = first.choices[0]?.message;
    const [call] = message?.tool_calls ?? [];
    if (call?.type !== 'function') throw new Error(`no function tool call in ${JSON.stringify(message)}`);
    expect(call.function.name).toBe(WEATHER_TOOL.name);
    // The SDK parsed the relayed JSON text with the tool's zod schema.
    expect(relayed).toEqual([{ id: call.id, name: WEATHER_TOOL.name, arguments: call.function.parsed_arguments }]);
    expect(weatherArguments.safeParse(call.function.parsed_arguments).success).toBe(true);

    messages.push(message as OpenAI.ChatCompletionMessageParam, { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ temperature: 21, unit: 'celsius' }) });
    const second = await sdk().chat.completions.create({ model: MODELS.chat, messages, tools: [weatherTool] });
    const { sent } = lastExchange(world, ROUTES.chat);
    expect(sent.messages).toEqual([expect.objectContaining({ role: 'user' }), expect.objectContaining({ role: 'assistant', tool_calls: [expect.objectContaining({ id: call.id })] }), expect.objectContaining({ role: 'tool', tool_call_id: call.id })]);
    expect(second.choices[0]?.finish_reason).toBe('stop');
    expect(second.choices[0]?.message.tool_calls ?? []).toEqual([]);
    expect(second.choices[0]?.message.content).toEqual(expect.stringMatching(/\w/));
    expect([first.model, second.model]).toEqual([MODELS.chat, MODELS.chat]);
  });

  it('streams a tool call as deltas the SDK joins into the call the gateway relayed', async () => {
    const stream = sdk().chat.completions.stream({ model: MODELS.chat, messages: ask('What is the weather in Oslo?'), tools: [weatherTool], stream_options: { include_usage: true } });
    const final = await stream.finalChatCompletion();
    const events = await eventsOf(lastExchange(world, ROUTES.chat));
    const [call] = final.choices[0]?.message.tool_calls ?? [];
    if (call?.type !== 'function') throw new Error(`no function tool call in ${JSON.stringify(final.choices[0]?.message)}`);
    expect(final.choices[0]?.finish_reason).toBe('tool_calls');
    expect(streamedToolCalls(events)).toEqual([{ id: call.id, name: WEATHER_TOOL.name, arguments: call.function.parsed_arguments }]);
    expect(weatherArguments.safeParse(call.function.parsed_arguments).success).toBe(true);
    expect(final.usage).toEqual(events.at(-1)?.usage);
  });

  it('answers structured output that the SDK parses with the zod schema of response_format json_schema', async () => {
    const answer = await sdk().chat.completions.parse({ model: MODELS.chat, messages: ask('Facts about Lisbon'), response_format: zodResponseFormat(cityFacts, 'city_facts') });
    const exchange = lastExchange(world, ROUTES.chat);
    expect(exchange.sent.response_format).toMatchObject({ type: 'json_schema', json_schema: { name: 'city_facts', strict: true } });
    const message = answer.choices[0]?.message;
    expect(answer.choices[0]?.finish_reason).toBe('stop');
    expect(message?.parsed).toEqual(JSON.parse((await answerOf<ChatCompletion>(exchange)).choices[0]?.message.content ?? ''));
    expect(cityFacts.safeParse(message?.parsed).success).toBe(true);
    expect(answer.model).toBe(MODELS.chat);
  });

  it('raises BadRequestError, and does not retry, for tools offered to a model whose family cannot call tools', async () => {
    const from = world.exchanges.length;
    const call = sdk(key, 2).chat.completions.create({ model: MODELS.chatWithoutTools, messages: ask('What is the weather in Paris?'), tools: [weatherTool] });
    await expect(call).rejects.toBeInstanceOf(BadRequestError);
    await expect(call).rejects.toMatchObject({ status: 400, code: 'unsupported_parameter', param: 'tools' });
    await expect(call).rejects.toThrow(/cannot call tools/);
    expect(world.exchanges.length - from).toBe(1);
  });

  it('answers a JSON object for response_format json_object', async () => {
    const answer = await sdk().chat.completions.create({ model: MODELS.chat, messages: ask('Describe Rome as JSON'), response_format: { type: 'json_object' } });
    const parsed: unknown = JSON.parse(answer.choices[0]?.message.content ?? '');
    expect(parsed).toEqual(expect.any(Object));
    expect(Array.isArray(parsed)).toBe(false);
  });
});

describe('embeddings', () => {
  it('answers floats, and base64 (the SDK’s default) that the SDK decodes to the same float32 values', async () => {
    const { key, id } = await world.newKey();
    const input = ['first text', 'second text'];
    const floats = await sdk(key).embeddings.create({ model: MODELS.embedding, input, encoding_format: 'float' });
    const relayed = await answerOf<EmbeddingList>(lastExchange(world, ROUTES.embeddings));
    expect(floats.data.map((item) => item.embedding)).toEqual(relayed.data.map((item) => item.embedding));

    const byDefault = await sdk(key).embeddings.create({ model: MODELS.embedding, input });
    const exchange = lastExchange(world, ROUTES.embeddings);
    expect(exchange.sent.encoding_format).toBe('base64');
    expect(typeof (await answerOf<EmbeddingList>(exchange)).data[0]?.embedding).toBe('string');
    expect(byDefault.data.map((item) => Array.from(item.embedding))).toEqual(floats.data.map((item) => item.embedding.map((value) => Math.fround(value))));
    const metered = await meteredUsage(world, id);
    expect([floats.usage, byDefault.usage]).toEqual(metered.map(({ prompt_tokens, total_tokens }) => ({ prompt_tokens, total_tokens })));
    expect([floats.model, byDefault.model]).toEqual([MODELS.embedding, MODELS.embedding]);
  });
});

describe('images', () => {
  it('answers url (a data URL) and b64_json with a JPEG the caller can decode', async () => {
    const byUrl = await sdk().images.generate({ model: MODELS.image, prompt: 'a lighthouse at dawn' });
    const [, base64] = /^data:image\/jpeg;base64,(.+)$/.exec(byUrl.data?.[0]?.url ?? '') ?? [];
    expect(isJpeg(base64)).toBe(true);
    const inline = await sdk().images.generate({ model: MODELS.image, prompt: 'a lighthouse at dawn', response_format: 'b64_json', n: 2 });
    expect(inline.data).toHaveLength(2);
    expect(inline.data?.every((image) => isJpeg(image.b64_json))).toBe(true);
  });
});

describe('audio transcriptions', () => {
  const audio = Buffer.alloc(32_000, 1);
  const text = `Simulated transcription of ${audio.length} bytes of audio.`;
  const transcribe = async <Format extends 'json' | 'text' | 'srt' | 'verbose_json' | 'vtt'>(response_format: Format) =>
    sdk().audio.transcriptions.create({ model: MODELS.audio, file: await toFile(audio, 'speech.wav'), response_format });

  it('answers every documented response_format in the form the SDK returns for it', async () => {
    expect(await transcribe('json')).toEqual({ text });
    expect(await transcribe('text')).toBe(`${text}\n`);
    // The simulator's Whisper: two segments of four and three words over 2 s of audio (16 kB/s).
    expect(await transcribe('srt')).toBe('1\n00:00:00,000 --> 00:00:01,000\nSimulated transcription of 32000\n\n2\n00:00:01,000 --> 00:00:02,000\nbytes of audio.\n\n');
    expect(await transcribe('vtt')).toBe('WEBVTT\n\n00:00:00.000 --> 00:00:01.000\nSimulated transcription of 32000\n\n00:00:01.000 --> 00:00:02.000\nbytes of audio.\n\n');
    const verbose = await transcribe('verbose_json');
    expect(verbose).toEqual(await answerOf(world.exchanges.at(-1)));
    expect(verbose).toMatchObject({ text, duration: 2, segments: [{ start: 0, end: 1 }, { start: 1, end: 2 }] });
  });
});

describe('rerank', () => {
  it('answers through the SDK’s generic post, which the SDK has no method for', async () => {
    const documents = ['The capital of France is Paris.', 'Bananas are yellow.', 'Paris hosts the Louvre.'];
    const answer = await sdk().post<{ results: Array<{ index: number; relevance_score: number; document: { text: string } | null }> }>('/rerank', {
      body: { model: MODELS.rerank, query: 'Paris', documents, top_n: 2, return_documents: true },
    });
    expect(answer.results).toHaveLength(2);
    expect(answer.results.map((result) => result.document?.text)).toEqual(answer.results.map((result) => documents[result.index]));
    const scores = answer.results.map((result) => result.relevance_score);
    expect(scores).toEqual([...scores].sort((a, b) => b - a));
  });
});

describe('errors and retries', () => {
  it('raises NotFoundError for a model nothing serves and AuthenticationError for a bad key', async () => {
    const unknown = sdk().chat.completions.create({ model: 'no-such-model', messages: ask('hi') });
    await expect(unknown).rejects.toBeInstanceOf(NotFoundError);
    await expect(unknown).rejects.toMatchObject({ status: 404, code: 'model_not_found' });
    const badKey = sdk(`svc-sk-${'a'.repeat(38)}`).chat.completions.create({ model: MODELS.chat, messages: ask('hi') });
    await expect(badKey).rejects.toBeInstanceOf(AuthenticationError);
    await expect(badKey).rejects.toMatchObject({ status: 401, code: 'invalid_api_key' });
  });

  it('waits out a 429 for as long as retry-after-ms says, and its retry is answered', async () => {
    const { key } = await world.newKey({ requests_per_minute: 30 });
    // The minute's requests used up, one refilling every 2 s: the last one sent was refused.
    let status: number | undefined = 200;
    for (let sent = 0; status === 200 && sent <= 30; sent++) {
      status = await sdk(key).chat.completions.create({ model: MODELS.chat, messages: ask('hi'), max_tokens: 1 }).then(() => 200, (error: APIError) => error.status);
    }
    expect(status).toBe(429);
    const from = world.exchanges.length;
    const reachedEngine = engineChats();
    const answer = await sdk(key, 2).chat.completions.create({ model: MODELS.chat, messages: ask('hi'), max_tokens: 1 });
    const [refused, retried, ...more] = world.exchanges.slice(from);
    expect([refused?.status, retried?.status, more.length]).toEqual([429, 200, 0]);
    const wait = Number(refused?.headers.get('retry-after-ms'));
    expect(wait).toBeGreaterThan(0);
    // The SDK slept what the header said (its timer fires no earlier; a millisecond of rounding).
    expect((retried?.sentAt ?? 0) - (refused?.answeredAt ?? 0)).toBeGreaterThanOrEqual(wait - 1);
    expect(engineChats() - reachedEngine).toBe(1);
    expect(answer.choices[0]?.finish_reason).toBe('length');
  });

  it('is told not to retry a wait of over a minute, which it would retry on its own backoff, and raises RateLimitError at once', async () => {
    const { key } = await world.newKey({ tokens_per_minute: 5 });
    // One answer uses more tokens than the minute allows (admitted while any were left): the key
    // owes the rest, and the next request waits until that has refilled too, over two minutes.
    await sdk(key).chat.completions.create({ model: MODELS.chat, messages: ask('hi'), max_tokens: 16 });
    const from = world.exchanges.length;
    const reachedEngine = engineChats();
    const call = sdk(key, 2).chat.completions.create({ model: MODELS.chat, messages: ask('hi'), max_tokens: 16 });
    await expect(call).rejects.toBeInstanceOf(RateLimitError);
    await expect(call).rejects.toMatchObject({ status: 429, code: 'rate_limit_exceeded' });
    const attempts = world.exchanges.slice(from);
    // The SDK sleeps a retry-after-ms of up to 60 s; past that it would fall back to its own
    // backoff (0.5 s, then 1 s: openai-node's `retryRequest`), unless x-should-retry says no.
    expect(attempts.map((attempt) => [attempt.status, attempt.headers.get('x-should-retry')])).toEqual([[429, 'false']]);
    expect(Number(attempts[0]?.headers.get('retry-after-ms'))).toBeGreaterThan(60_000);
    expect(engineChats() - reachedEngine).toBe(0);
  });
});

/** Base64 of a JPEG (its first bytes are the SOI marker and a segment's). */
function isJpeg(base64: string | undefined): boolean {
  return Buffer.from(base64 ?? '', 'base64').subarray(0, 3).equals(Buffer.from([0xff, 0xd8, 0xff]));
}
