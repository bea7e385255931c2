import { createParser } from 'eventsource-parser';
import { z } from 'zod';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import type { components } from '../../generated/api.d.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from './app.ts';
import { contractFetch, type Fetch } from './contract.ts';

/**
 * What the client contract suites (test/integration/clients-openai, clients-vercel-ai and
 * clients-langchain) share: an app with running deployments on the cluster simulator, keys for
 * them, every exchange a client has with the gateway recorded as it went over the wire, and the
 * usage the gateway metered. A suite asserts what the client made of an answer against the answer
 * itself (the arguments it parsed, the usage it reports), so that it fails if the gateway relays
 * something the client misreads.
 */

/**
 * The catalog models the suites call. The chat model's Xinference specification has the `tools`
 * ability (dev/simulator/xinference-models.json, `qwen2.5-instruct`: chat, tools), so the engine
 * answers tool calls and structured output for it; `chatWithoutTools`'s has chat only.
 */
export const MODELS = {
  chat: 'qwen2.5-instruct',
  chatWithoutTools: 'phi-3-mini-128k-instruct',
  embedding: 'bge-m3',
  rerank: 'bge-reranker-v2-m3',
  image: 'FLUX.1-schnell',
  audio: 'whisper-large-v3',
} as const;
export type ModelKind = keyof typeof MODELS;

type KeyLimits = components['schemas']['CreateApiKeyRequest']['limits'];

export interface Exchange {
  method: string;
  /** The path under the service's URL, e.g. `/v1/chat/completions`. */
  path: string;
  /** The JSON body the client sent; undefined for another kind of body (a multipart upload). */
  sent: Record<string, unknown> | undefined;
  status: number;
  headers: Headers;
  /** When the client sent the request and when the answer's headers arrived (`performance.now()`). */
  sentAt: number;
  answeredAt: number;
  /** The answer's body as it arrived, read from a copy while the client reads its own. */
  received: Promise<string>;
}

export interface ClientWorld {
  app: TestApp;
  /** The gateway's OpenAI base URL, `…/v1`. */
  baseURL: string;
  /** A fetch for the clients: each answer checked against the document (contract.ts) and recorded in `exchanges`. */
  fetch: Fetch;
  exchanges: Exchange[];
  /** A new key scoped to every deployment of the world, with `limits` when given: its secret and id. */
  newKey(limits?: KeyLimits): Promise<{ key: string; id: number }>;
  close(): Promise<void>;
}

/** An app with workers and the cluster simulator, and a running deployment of each model kind asked for. */
export async function startClientWorld(kinds: readonly ModelKind[]): Promise<ClientWorld> {
  const app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' }, { workers: true, cluster: { modelLoadMs: 100, tokenLatencyMs: 1 } });
  const owner = await registeredUser(app);
  const running = await Promise.all(kinds.map((kind) => deployment(app, owner, 'running', { model_name: MODELS[kind] })));
  const exchanges: Exchange[] = [];
  const recording: Fetch = async (input, init) => {
    const sentAt = performance.now();
    const response = await fetch(input, init);
    const url = new URL(input instanceof Request ? input.url : input);
    const received = response.clone().text();
    // Read only by the tests that look at it; a body cut short must not fail the others.
    received.catch(() => undefined);
    exchanges.push({
      method: init?.method ?? 'GET',
      path: url.pathname,
      sent: typeof init?.body === 'string' ? (JSON.parse(init.body) as Record<string, unknown>) : undefined,
      status: response.status,
      headers: response.headers,
      sentAt,
      answeredAt: performance.now(),
      received,
    });
    return response;
  };
  return {
    app,
    baseURL: `${app.url}/v1`,
    fetch: contractFetch(app.url, recording),
    exchanges,
    newKey: (limits) => apiKey(owner, running.map((d) => d.id), limits ? { limits } : {}),
    close: () => app.close(),
  };
}

/** The exchanges on `path` (`/v1/chat/completions`) so far, oldest first. */
export function exchangesOn(world: Pick<ClientWorld, 'exchanges'>, path: string): Exchange[] {
  return world.exchanges.filter((exchange) => exchange.path === path);
}

/** The last exchange on `path`, which sent JSON. */
export function lastExchange(world: Pick<ClientWorld, 'exchanges'>, path: string): Exchange & { sent: Record<string, unknown> } {
  const exchange = exchangesOn(world, path).at(-1);
  if (!exchange?.sent) throw new Error(`no JSON exchange on ${path}`);
  return { ...exchange, sent: exchange.sent };
}

/** The JSON answer of an exchange, as relayed. */
export async function answerOf<T = Record<string, unknown>>(exchange: Exchange | undefined): Promise<T> {
  if (!exchange) throw new Error('no such exchange');
  return JSON.parse(await exchange.received) as T;
}

/** The `data:` events of a streamed answer, as relayed and parsed (`[DONE]` left out). */
export async function eventsOf(exchange: Exchange | undefined): Promise<ChatChunk[]> {
  if (!exchange) throw new Error('no such exchange');
  const events: ChatChunk[] = [];
  const parser = createParser({ onEvent: (event) => void (event.data !== '[DONE]' && events.push(JSON.parse(event.data) as ChatChunk)) });
  parser.feed(await exchange.received);
  return events;
}

export type ChatChunk = components['schemas']['ChatCompletionChunk'];
export type ChatCompletion = components['schemas']['ChatCompletion'];
export type EmbeddingList = components['schemas']['EmbeddingList'];

/** The inference routes the suites look at the exchanges of. */
export const ROUTES = { chat: '/v1/chat/completions', embeddings: '/v1/embeddings' } as const;

/** The tool calls of a chat answer as relayed: name and arguments, parsed from the JSON text. */
export function relayedToolCalls(answer: ChatCompletion): Array<{ id: string; name: string; arguments: unknown }> {
  const message = answer.choices[0]?.message;
  return (message?.tool_calls ?? []).map((call) => ({ id: call.id, name: call.function.name, arguments: JSON.parse(call.function.arguments) }));
}

/** The tool calls of a streamed chat answer as relayed: the deltas of each call joined, the arguments parsed. */
export function streamedToolCalls(events: readonly ChatChunk[]): Array<{ id: string; name: string; arguments: unknown }> {
  const calls: Array<{ id: string; name: string; text: string }> = [];
  for (const event of events) {
    for (const delta of event.choices[0]?.delta.tool_calls ?? []) {
      const call = (calls[delta.index] ??= { id: '', name: '', text: '' });
      call.id ||= delta.id ?? '';
      call.name += delta.function?.name ?? '';
      call.text += delta.function?.arguments ?? '';
    }
  }
  return calls.map((call) => ({ id: call.id, name: call.name, arguments: JSON.parse(call.text) }));
}

export interface MeteredTokens {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** The tokens of each usage record the gateway wrote for the key's calls, oldest first (written in batches: flushed first). */
export async function meteredUsage(world: Pick<ClientWorld, 'app'>, keyId: number): Promise<MeteredTokens[]> {
  await world.app.container.usage.flush();
  return world.app.db('usage_records').where({ api_key_id: keyId }).orderBy('id').select('prompt_tokens', 'completion_tokens', 'total_tokens');
}

/** The arguments of the function tool the suites offer the model (`get_weather`): both required, nothing else. */
export const weatherArguments = z.strictObject({
  city: z.string().describe('The city, e.g. Paris'),
  unit: z.enum(['celsius', 'fahrenheit']),
});
export const WEATHER_TOOL = { name: 'get_weather', description: 'The current weather in a city.' } as const;

/** The structured output the suites ask for (`response_format` json_schema). */
export const cityFacts = z.strictObject({
  city: z.string(),
  population: z.number().int(),
  landmarks: z.array(z.string()),
});
