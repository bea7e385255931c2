import type { AnswerWatch } from './answer-watch.ts';
import { promptTokens, tokenCounter, type TokenCounter } from './token-estimate.ts';
import type { UsageRecord } from './usage.ts';

/** The metered part of a usage record. */
export type Metered = Pick<UsageRecord, 'unit' | 'quantity' | 'promptTokens' | 'completionTokens' | 'totalTokens' | 'estimated'>;

/**
 * What a route is metered by, from what was delivered (nothing, when the client left before the
 * engine answered) and the request that was sent to the engine. A promise when it estimates with
 * the tokenizer (loaded on first use).
 */
export type Meter = (delivery: { answer: AnswerWatch }, request: { bytes: number; body: Record<string, unknown> }) => Metered | Promise<Metered>;

/**
 * Chat and embeddings: tokens as the engine reported them; when it did not (the client left before
 * the answer or before a stream's usage chunk, an engine that reports nothing), estimated with the
 * tokenizer (token-estimate.ts): the prompt from the request sent, the completion from the generated
 * text delivered (at least a token per chunk that carried some).
 */
export const byTokens: Meter = (delivery, request) => {
  const reported = delivery.answer.usage();
  if (reported) return { unit: 'token', quantity: reported.totalTokens, ...reported, estimated: false };
  return tokenCounter().then((count) => estimatedTokens(promptTokens(request.body, count), completionTokens(delivery.answer, count)));
};

/** Rerank: `meta.tokens.input_tokens`, asked of the engine with `return_len: true`; estimated when absent. */
export const byRerankTokens: Meter = (delivery, request) => {
  const tokens = delivery.answer.rerankTokens();
  if (tokens === undefined) return tokenCounter().then((count) => estimatedTokens(promptTokens(request.body, count), 0));
  return { unit: 'token', quantity: tokens, promptTokens: tokens, completionTokens: 0, totalTokens: tokens, estimated: false };
};

/** Images: the number asked for (`n`, 1 by default): the engine renders them once it has the request. */
export const byImages: Meter = (_delivery, request) => {
  const images = typeof request.body.n === 'number' ? request.body.n : 1;
  return { unit: 'image', quantity: images, promptTokens: 0, completionTokens: 0, totalTokens: 0, estimated: false };
};

/**
 * Transcriptions: one request, whatever the audio's length. (Xinference reports a duration only in
 * `verbose_json`, as the end of the last segment, so it misses trailing silence and may be absent.)
 */
export const perRequest: Meter = () => ({ unit: 'request', quantity: 1, promptTokens: 0, completionTokens: 0, totalTokens: 0, estimated: false });

/** The generated text a stream delivered, in tokens: the text kept counted, scaled to its whole length. */
function completionTokens(answer: AnswerWatch, count: TokenCounter): number {
  const { text, chars } = answer.generated;
  const counted = text.length === 0 ? 0 : Math.ceil((count(text) * chars) / text.length);
  return Math.max(counted, answer.contentChunks);
}

function estimatedTokens(prompt: number, completion: number): Metered {
  const totalTokens = prompt + completion;
  return { unit: 'token', quantity: totalTokens, promptTokens: prompt, completionTokens: completion, totalTokens, estimated: true };
}
