import OpenAI from 'openai';
import type { TestApp } from './app.ts';
import { contractFetch } from './contract.ts';

/**
 * The official openai client on the service's inference routes, with an API key: what customers
 * use. Its answers (errors and the first event of a stream included) are checked against the
 * document as the typed client's are.
 */
export function inferenceClient(app: Pick<TestApp, 'url'>, apiKey: string): OpenAI {
  return new OpenAI({ apiKey, baseURL: `${app.url}/v1`, maxRetries: 0, fetch: contractFetch(app.url) });
}
