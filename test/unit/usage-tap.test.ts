import { describe, expect, it } from 'vitest';
import { AnswerWatch, toUsage } from '../../src/inference/answer-watch.ts';
import { byImages, byRerankTokens, byTokens, perRequest } from '../../src/inference/metering.ts';
import { isoTimestamp } from '../../src/inference/usage.ts';

/** Feeds `text` to a watch in pieces of `size` bytes (so multi-byte characters split too). */
function watch(streaming: boolean, text: string, size = text.length): AnswerWatch {
  const answer = new AnswerWatch(streaming);
  const bytes = Buffer.from(text, 'utf8');
  for (let i = 0; i < bytes.length; i += size) answer.observe(bytes.subarray(i, i + size));
  return answer;
}

const chunk = (content: string | null, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: content === null ? [] : [{ index: 0, delta: { content }, finish_reason: null }], ...extra });
const usage = { prompt_tokens: 11, completion_tokens: 3, total_tokens: 14 };

describe('the SSE tail parser', () => {
  // Xinference (sse-starlette) ends lines with CRLF; other engines with LF; the standard allows CR too.
  it.each([
    ['CRLF', '\r\n'],
    ['LF', '\n'],
    ['CR', '\r'],
  ])('reads events framed with %s, across any chunk boundary', (_name, eol) => {
    const stream = [chunk('Hé'), chunk(''), chunk('llo wörld'), chunk(null, { usage }), '[DONE]'].map((data) => `data: ${data}${eol}${eol}`).join('');
    for (const size of [1, 2, 3, 7, 1000]) {
      const answer = watch(true, stream, size);
      expect(answer.contentChunks, `pieces of ${size}`).toBe(2);
      expect(answer.usage()).toEqual({ promptTokens: 11, completionTokens: 3, totalTokens: 14 });
      expect(answer.atEventBoundary).toBe(true);
    }
  });

  it('joins multi-line data, skips comments, other fields and error events, and counts tool calls as content', () => {
    const toolCall = JSON.stringify({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '{' } }] } }] });
    const multiLine = `data: {"choices":[{"index":0,\ndata: "delta":{"content":"x"}}]}\n\n`;
    const stream = `: keep-alive\n\nevent: message\nid: 3\ndata: ${toolCall}\n\n${multiLine}data: {"error":"engine died"}\n\ndata: not json\n\n`;
    const answer = watch(true, stream, 5);
    expect(answer.contentChunks).toBe(2);
    expect(answer.usage()).toBeUndefined();
  });

  it('keeps the last usage reported, and knows when a stream stopped between two events or inside one', () => {
    const whole = `data: ${chunk(null, { usage: { prompt_tokens: 1, total_tokens: 1 } })}\n\ndata: ${chunk(null, { usage })}\n\n`;
    expect(watch(true, whole, 4).usage()).toEqual({ promptTokens: 11, completionTokens: 3, totalTokens: 14 });
    expect(watch(true, `data: ${chunk('a')}\n\ndata: {"choi`).atEventBoundary).toBe(false);
    expect(watch(true, `data: ${chunk('a')}\r\n\r\n`).atEventBoundary).toBe(true);
  });

  it('skips an event longer than it holds and reads the ones after it', () => {
    const huge = `data: ${chunk('x'.repeat(2 * 1024 * 1024))}\n\n`;
    const answer = watch(true, `${huge}data: ${chunk('after')}\n\ndata: ${chunk(null, { usage })}\n\n`, 64 * 1024);
    expect(answer.contentChunks).toBe(1);
    expect(answer.usage()?.totalTokens).toBe(14);
  });
});

describe('usage extraction from JSON answers', () => {
  it('finds usage at the end of a large answer, whatever its chunks', () => {
    const big = JSON.stringify({ object: 'list', data: [{ embedding: Array.from({ length: 40_000 }, (_, i) => i / 7) }], usage: { prompt_tokens: 9, total_tokens: 9 } });
    expect(watch(false, big, 8192).usage()).toEqual({ promptTokens: 9, completionTokens: 0, totalTokens: 9 });
  });

  it('takes the last `usage` followed by an object, not one quoted in the content or one without an object', () => {
    const quoted = { total_tokens: 1, prompt_tokens: 1 };
    const answer = JSON.stringify({ choices: [{ message: { content: `"usage": ${JSON.stringify(quoted)}` } }], usage: { prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 } });
    expect(watch(false, answer, 7).usage()).toEqual({ promptTokens: 2, completionTokens: 3, totalTokens: 5 });
    const withoutObject = `{"usage": {"prompt_tokens": 4, "total_tokens": 4}, "choices": [], "usage": null}`;
    expect(watch(false, withoutObject).usage()).toEqual({ promptTokens: 4, completionTokens: 0, totalTokens: 4 });
    expect(watch(false, '{"usage": {"prompt_tokens": 4, "total_tokens": }}').usage()).toBeUndefined();
  });

  it('reads rerank’s meta.tokens', () => {
    const rerank = JSON.stringify({ id: 'r', results: [{ index: 0, relevance_score: 0.9, document: null }], meta: { api_version: null, tokens: { input_tokens: 38, output_tokens: 38 } } });
    expect(watch(false, rerank, 3).rerankTokens()).toBe(38);
    expect(watch(false, JSON.stringify({ id: 'r', results: [], meta: { tokens: null } })).rerankTokens()).toBeUndefined();
  });

  it('accepts only non-negative finite counts, and needs prompt or total tokens', () => {
    expect(toUsage({ prompt_tokens: 4.7, completion_tokens: 2 })).toEqual({ promptTokens: 4, completionTokens: 2, totalTokens: 6 });
    expect(toUsage({ total_tokens: 5 })).toEqual({ promptTokens: 0, completionTokens: 0, totalTokens: 5 });
    expect(toUsage({ completion_tokens: 5 })).toBeUndefined();
    expect(toUsage({ prompt_tokens: -1, total_tokens: 'x' })).toBeUndefined();
    expect(toUsage(null)).toBeUndefined();
  });
});

describe('metering by route', () => {
  const request = { bytes: 400, body: {} };

  it('meters tokens as reported, or estimates them with the tokenizer from the prompt sent and the text delivered', async () => {
    const reported = watch(true, `data: ${chunk('a')}\n\ndata: ${chunk(null, { usage })}\n\n`);
    expect(byTokens({ answer: reported }, request)).toEqual({ unit: 'token', quantity: 14, promptTokens: 11, completionTokens: 3, totalTokens: 14, estimated: false });
    // cl100k: "user\nhello there" is 4 tokens, plus 4 for the message; " hello world" three times is 6.
    const prompt = { bytes: 400, body: { model: 'm', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 10 } };
    const cut = watch(true, `data: ${chunk(' hello world')}\n\ndata: ${chunk(' hello world')}\n\ndata: ${chunk(' hello world')}\n\n`);
    expect(await byTokens({ answer: cut }, prompt)).toEqual({ unit: 'token', quantity: 14, promptTokens: 8, completionTokens: 6, totalTokens: 14, estimated: true });
    // A chunk holds at least a token, whatever its text.
    const tiny = watch(true, `data: ${chunk('a')}\n\ndata: ${chunk('b')}\n\ndata: ${chunk('c')}\n\n`);
    expect(await byTokens({ answer: tiny }, prompt)).toMatchObject({ completionTokens: 3, estimated: true });
    // Nothing delivered (the client left before the answer): the prompt only.
    expect(await byTokens({ answer: new AnswerWatch(false) }, prompt)).toMatchObject({ promptTokens: 8, completionTokens: 0, totalTokens: 8 });
  });

  it('reads a completion stream as a chat stream: its text pieces (`choices[].text`) and its usage chunk', async () => {
    const piece = (text: string) => JSON.stringify({ id: 'cmpl', object: 'text_completion', choices: [{ text, index: 0, logprobs: null, finish_reason: null }] });
    const usageChunk = JSON.stringify({ id: 'cmpl', object: 'text_completion', choices: [], usage });
    const reported = watch(true, `data: ${piece(' hello')}\n\ndata: ${piece('')}\n\ndata: ${usageChunk}\n\ndata: [DONE]\n\n`, 3);
    expect(reported.contentChunks).toBe(1);
    expect(byTokens({ answer: reported }, request)).toMatchObject({ quantity: 14, estimated: false });
    // Cut short before its usage: " hello world" three times is 6 tokens; the prompt "hello there" 2.
    const cut = watch(true, [' hello world', ' hello world', ' hello world'].map((text) => `data: ${piece(text)}\n\n`).join(''));
    const prompt = { bytes: 40, body: { model: 'm', prompt: 'hello there', max_tokens: 10 } };
    expect(await byTokens({ answer: cut }, prompt)).toEqual({ unit: 'token', quantity: 8, promptTokens: 2, completionTokens: 6, totalTokens: 8, estimated: true });
  });

  it('samples a long prompt and scales it to its length, and counts token-id inputs one token each', async () => {
    const long = { bytes: 0, body: { input: 'The quick brown fox jumps over the lazy dog. '.repeat(20_000) } };
    const tokens = (await byTokens({ answer: new AnswerWatch(false) }, long)).promptTokens;
    expect(Math.abs(tokens - 200_000) / 200_000).toBeLessThan(0.01);
    expect((await byTokens({ answer: new AnswerWatch(false) }, { bytes: 0, body: { input: [[1, 2, 3], [4, 5]] } })).promptTokens).toBe(5);
  });

  it('meters rerank in the engine’s input tokens, images per image asked for, transcriptions per request', async () => {
    const rerank = watch(false, '{"meta":{"tokens":{"input_tokens":38,"output_tokens":38}}}');
    expect(byRerankTokens({ answer: rerank }, request)).toMatchObject({ unit: 'token', quantity: 38, estimated: false });
    expect(await byRerankTokens({ answer: watch(false, '{}') }, { bytes: 0, body: { query: 'hello there', documents: ['hello world'] } })).toMatchObject({ unit: 'token', quantity: 5, estimated: true });
    expect(byImages({ answer: watch(false, '{}') }, { bytes: 10, body: { n: 3 } })).toMatchObject({ unit: 'image', quantity: 3 });
    expect(byImages({ answer: watch(false, '{}') }, { bytes: 10, body: {} })).toMatchObject({ unit: 'image', quantity: 1 });
    expect(perRequest({ answer: watch(false, '{"text":"hi"}') }, request)).toMatchObject({ unit: 'request', quantity: 1 });
  });
});

describe('isoTimestamp', () => {
  it('formats as toISOString does, across seconds and in any order', () => {
    const dates = [0, 999, 1_000, 1_764_133_200_000, 1_764_133_200_001, 1_764_133_199_999, 1_764_133_200_000, 4_102_444_800_123].map((ms) => new Date(ms));
    expect(dates.map(isoTimestamp)).toEqual(dates.map((date) => date.toISOString()));
  });
});
