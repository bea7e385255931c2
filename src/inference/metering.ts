import type { AnswerWatch } from './answer-watch.ts';
import type { UsageRecord } from './usage.ts';

/** The metered part of a usage record. */
export type Metered = Pick<UsageRecord, 'unit' | 'quantity' | 'promptTokens' | 'completionTokens' | 'totalTokens' | 'estimated'>;

/** What a route is metered by, from what was delivered and the request that was sent to the engine. */
export type Meter = (delivery: { answer: AnswerWatch }, request: { bytes: number; body: Record<string, unknown> }) => Metered;

/**
 * Chat and embeddings: tokens as the engine reported them; when it did not (an aborted stream
 * before its usage chunk, an engine that reports nothing), an estimate: the prompt at one token
 * per 4 bytes of the request sent, and one token per stream chunk that carried generated content.
 */
export const byTokens: Meter = (delivery, request) => {
  const reported = delivery.answer.usage();
  if (reported) return { unit: 'token', quantity: reported.totalTokens, ...reported, estimated: false };
  return estimatedTokens(request.bytes, delivery.answer.contentChunks);
};

/** Rerank: `meta.tokens.input_tokens`, asked of the engine with `return_len: true`; estimated when absent. */
export const byRerankTokens: Meter = (delivery, request) => {
  const tokens = delivery.answer.rerankTokens();
  if (tokens === undefined) return estimatedTokens(request.bytes, 0);
  return { unit: 'token', quantity: tokens, promptTokens: tokens, completionTokens: 0, totalTokens: tokens, estimated: false };
};

/** Images: the number asked for (`n`, 1 by default), generated in full once the engine answers. */
export const byImages: Meter = (_delivery, request) => {
  const images = typeof request.body.n === 'number' ? request.body.n : 1;
  return { unit: 'image', quantity: images, promptTokens: 0, completionTokens: 0, totalTokens: 0, estimated: false };
};

/**
 * Transcriptions: one request, whatever the audio's length. (Xinference reports a duration only in
 * `verbose_json`, as the end of the last segment, so it misses trailing silence and may be absent.)
 */
export const perRequest: Meter = () => ({ unit: 'request', quantity: 1, promptTokens: 0, completionTokens: 0, totalTokens: 0, estimated: false });

function estimatedTokens(requestBytes: number, completionTokens: number): Metered {
  const promptTokens = Math.ceil(requestBytes / 4);
  const totalTokens = promptTokens + completionTokens;
  return { unit: 'token', quantity: totalTokens, promptTokens, completionTokens, totalTokens, estimated: true };
}
