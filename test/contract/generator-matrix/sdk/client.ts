/**
 * A short typed client an SDK team would write on the openapi-typescript + openapi-fetch output:
 * compiled with the probes (`tsc --strict`), then run by the matrix against Prism and the real
 * server. `streamChat` is the typed streaming call of docs/api-for-sdk-teams.md.
 */
import { createParser } from 'eventsource-parser';
import createClient, { type Client } from 'openapi-fetch';
import type { components, paths } from './out/openapi-typescript/api.ts';

export type GeneratedClient = Client<paths>;
export type ChatCompletionChunk = components['schemas']['ChatCompletionChunk'];
type ChatRequest = components['schemas']['CreateChatCompletionRequest'];

export function generatedClient(baseUrl: string, options: { fetch?: (request: Request) => Promise<Response>; headers?: Record<string, string> } = {}): GeneratedClient {
  return createClient<paths>({ baseUrl, headers: options.headers ?? {}, ...(options.fetch ? { fetch: options.fetch } : {}) });
}

/** A chat completion with `stream: true`, read event by event: each `data:` a ChatCompletionChunk, up to `data: [DONE]`. */
export async function* streamChat(client: GeneratedClient, request: ChatRequest): AsyncGenerator<ChatCompletionChunk> {
  // Accept names the stream, so a mock (Prism) picks the event-stream answer too.
  const { response } = await client.POST('/v1/chat/completions', { body: { ...request, stream: true }, parseAs: 'stream', headers: { Accept: 'text/event-stream' } });
  if (!response.ok || !response.body) throw new Error(`the chat stream answered ${response.status}`);
  const events: string[] = [];
  const parser = createParser({ onEvent: (event) => events.push(event.data) });
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      parser.feed(decoder.decode(value, { stream: true }));
      for (let data = events.shift(); data !== undefined; data = events.shift()) {
        if (data === '[DONE]') return;
        yield JSON.parse(data) as ChatCompletionChunk;
      }
    }
  } finally {
    reader.cancel().catch(() => undefined);
  }
}

/** The typed happy paths every caller meets: health, a page of deployments, a new deployment. */
export async function managementHappyPaths(client: GeneratedClient) {
  const health = await client.GET('/healthz');
  const page = await client.GET('/api/v1/model-deployments', { params: { query: { limit: 10 } } });
  const created = await client.POST('/api/v1/model-deployments', { body: { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 } });
  return { health: health.data?.status, total: page.data?.total, created: created.data?.status, createdStatus: created.response.status };
}

/** A chat completion without `stream`: one typed ChatCompletion. */
export async function chat(client: GeneratedClient, model: string) {
  const { data, response } = await client.POST('/v1/chat/completions', { body: { model, messages: [{ role: 'user', content: 'Capital of France?' }] } });
  return { status: response.status, object: data && 'object' in data ? data.object : undefined };
}

/** The typed error of a delete whose cleanup is still running, as a mock answers `Prefer: code=409`. */
export async function deleteWhilePending(client: GeneratedClient, id: string) {
  const { error, response } = await client.DELETE('/api/v1/model-deployments/{deployment_id}', {
    params: { path: { deployment_id: id } },
    headers: { Prefer: 'code=409' },
  });
  const code: components['schemas']['ErrorCode'] | undefined = error?.code;
  return { status: response.status, code, bodyStatus: error?.status };
}
