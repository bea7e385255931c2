/**
 * The same happy paths on the SDK @hey-api/openapi-ts generates, which validates each request and
 * answer with its zod schemas: run by the matrix against Prism and the real server.
 */
import { createClient } from './out/hey-api/client/index.js';
import { createChatCompletion, createDeployment, createTranscription, getHealth, listDeployments } from './out/hey-api/sdk.gen.js';

export interface Caller {
  headers?: Record<string, string>;
  fetch?: typeof fetch;
}

export async function heyApiHappyPaths(baseUrl: string, session: Caller, key: Caller, model: string) {
  // One client per caller (the generated default client is a module-wide singleton).
  const asSession = createClient({ baseUrl, headers: session.headers ?? {}, ...(session.fetch ? { fetch: session.fetch } : {}) });
  const asKey = createClient({ baseUrl, headers: key.headers ?? {}, ...(key.fetch ? { fetch: key.fetch } : {}) });
  const health = await getHealth({ client: asSession, throwOnError: true });
  const page = await listDeployments({ client: asSession, throwOnError: true, query: { limit: 10 } });
  const created = await createDeployment({ client: asSession, throwOnError: true, body: { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 } });
  const chat = await createChatCompletion({ client: asKey, throwOnError: true, body: { model, messages: [{ role: 'user', content: 'Capital of France?' }] } });
  return { health: health.data.status, total: page.data.total, created: created.data.status, chat: 'object' in chat.data ? chat.data.object : undefined };
}

/** A `Blob` upload, which the SDK's zod schema checks (`z.instanceof(Blob)`, docs/api-for-sdk-teams.md: generator settings) before sending the form. */
export async function heyApiTranscribe(baseUrl: string, key: Caller, model: string) {
  const asKey = createClient({ baseUrl, headers: key.headers ?? {}, ...(key.fetch ? { fetch: key.fetch } : {}) });
  const audio = new Blob([new Uint8Array(64)], { type: 'audio/wav' });
  const { data } = await createTranscription({ client: asKey, throwOnError: true, body: { file: audio, model } });
  return 'text' in data ? data.text : data;
}
