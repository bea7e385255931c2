import OpenAI from 'openai';
import type { TestApp } from './app.ts';
import { contractFetch, type Fetch } from './contract.ts';

/**
 * The official openai client on the service's inference routes, with an API key: what customers
 * use. Its answers (errors and the first event of a stream included) are checked against the
 * document as the typed client's are (a `fetch` given must check them too: `contractFetch`).
 * It does not retry unless `maxRetries` says so.
 */
export function inferenceClient(app: Pick<TestApp, 'url'>, apiKey: string, options: { fetch?: Fetch; maxRetries?: number } = {}): OpenAI {
  return new OpenAI({ apiKey, baseURL: `${app.url}/v1`, maxRetries: options.maxRetries ?? 0, fetch: options.fetch ?? contractFetch(app.url) });
}
