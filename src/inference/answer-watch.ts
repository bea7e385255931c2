import { StringDecoder } from 'node:string_decoder';
import { createParser, type EventSourceParser } from 'eventsource-parser';

export interface Usage {
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
}

const KEEP = 64 * 1024;
/** Generated text kept for an estimate of a stream cut short (the rest is counted in characters). */
const KEEP_TEXT = 64 * 1024;
/** Longest event the stream parser holds while it is incomplete; a longer one is skipped. */
const EVENT_MAX = 1024 * 1024;
/** A key and its flat object value, matched where the key starts (sticky). */
const USAGE = { key: '"usage"', pattern: /"usage"\s*:\s*(\{[^{}]*\})/y };
const RERANK_TOKENS = { key: '"tokens"', pattern: /"tokens"\s*:\s*(\{[^{}]*\})/y };

/**
 * The usage tap: reads what metering needs from the engine's answer as it passes, without holding
 * it. For JSON, the first and last 64 KiB (where `usage`, or rerank's `meta.tokens`, is). For an
 * event stream, each event as it completes (eventsource-parser, so every framing the SSE standard
 * allows: LF, CRLF or CR line ends, multi-line data), counting the chunks that carried generated
 * content, keeping the generated text (its first 64 Ki characters; the rest counted) for an estimate
 * of a stream cut short, and keeping the last usage reported.
 */
export class AnswerWatch {
  readonly #streaming: boolean;
  readonly #decoder = new StringDecoder('utf8');
  readonly #events: EventSourceParser | undefined;
  #head = '';
  #tail = '';
  #reported: Usage | undefined;
  #contentChunks = 0;
  #text = '';
  #textChars = 0;
  #lastBytes = '\n\n';
  #done = false;
  #failed = false;

  constructor(streaming: boolean) {
    this.#streaming = streaming;
    if (streaming) this.#events = createParser({ onEvent: (event) => this.#event(event.data), maxBufferSize: EVENT_MAX });
  }

  observe(chunk: Buffer): void {
    const text = this.#decoder.write(chunk);
    this.#lastBytes = (this.#lastBytes + text).slice(-4);
    if (!this.#events) {
      if (this.#head.length < KEEP) this.#head += text.slice(0, KEEP - this.#head.length);
      this.#tail = (this.#tail + text).slice(-KEEP);
      return;
    }
    try {
      this.#events.feed(text);
    } catch {
      // An event over EVENT_MAX: it is skipped (the rest of its line is not a field), the next ones are read.
      this.#events.reset();
      this.#events.feed(text);
    }
  }

  /** True when what was relayed so far ends between two events. */
  get atEventBoundary(): boolean {
    const last = this.#lastBytes;
    return last.endsWith('\n\n') || last.endsWith('\r\n\r\n') || last.endsWith('\r\r');
  }

  /** Stream chunks that carried generated text (chat's or a completion's) or tool calls (each holds at least one token). */
  get contentChunks(): number {
    return this.#contentChunks;
  }

  /**
   * The generated text the stream carried (content, reasoning, tool calls' names and arguments, a
   * completion's text), as far as it was kept, and its whole length in characters.
   */
  get generated(): { text: string; chars: number } {
    return { text: this.#text, chars: this.#textChars };
  }

  /** The usage the engine reported: the last stream chunk's, or the JSON answer's. */
  usage(): Usage | undefined {
    if (this.#streaming) return this.#reported;
    const found = lastMatch(USAGE, this.#tail) ?? lastMatch(USAGE, this.#head);
    return found ? toUsage(found) : undefined;
  }

  /** Rerank's `meta.tokens.input_tokens`, when the engine reported it. */
  rerankTokens(): number | undefined {
    const found = lastMatch(RERANK_TOKENS, this.#tail) ?? lastMatch(RERANK_TOKENS, this.#head);
    const tokens = (found as { input_tokens?: unknown } | undefined)?.input_tokens;
    return typeof tokens === 'number' && tokens >= 0 ? Math.floor(tokens) : undefined;
  }

  /**
   * Whether the stream ended as streams end: its `data: [DONE]` came (Xinference ends a
   * completion's stream without it), or an error event, after which none comes.
   */
  get sawEnd(): boolean {
    return this.#done || this.#failed;
  }

  #event(data: string): void {
    if (data === '[DONE]') this.#done = true;
    if (!data.startsWith('{')) return;
    let chunk: {
      error?: unknown;
      usage?: unknown;
      choices?: Array<{ text?: unknown; delta?: { content?: unknown; reasoning_content?: unknown; tool_calls?: Array<{ function?: { name?: unknown; arguments?: unknown } } | null> } } | null>;
    };
    try {
      chunk = JSON.parse(data);
    } catch {
      return;
    }
    if (chunk.error) this.#failed = true;
    if (chunk.usage) this.#reported = toUsage(chunk.usage) ?? this.#reported;
    let generated = false;
    for (const choice of chunk.choices ?? []) {
      // A completion's chunk carries its piece of text as `text`, a chat chunk as `delta`.
      if (this.#keep(choice?.text)) generated = true;
      const delta = choice?.delta;
      if (!delta) continue;
      if (this.#keep(delta.content)) generated = true;
      if (this.#keep(delta.reasoning_content)) generated = true;
      for (const call of delta.tool_calls ?? []) {
        this.#keep(call?.function?.name);
        this.#keep(call?.function?.arguments);
        generated = true;
      }
    }
    if (generated) this.#contentChunks++;
  }

  /** Keeps generated text; false when `text` is none. */
  #keep(text: unknown): boolean {
    if (typeof text !== 'string' || text === '') return false;
    this.#textChars += text.length;
    if (this.#text.length < KEEP_TEXT) this.#text += text.slice(0, KEEP_TEXT - this.#text.length);
    return true;
  }
}

/**
 * The value of the last `key` in `text` followed by a flat object, parsed (undefined when it is not
 * JSON). Looked for from the end, where the engines put usage: a scan of the whole answer with the
 * pattern was 1.4 % of the proxy's CPU at 64 connections.
 */
function lastMatch(search: { key: string; pattern: RegExp }, text: string): unknown {
  for (let at = text.lastIndexOf(search.key); at >= 0; at = at > 0 ? text.lastIndexOf(search.key, at - 1) : -1) {
    search.pattern.lastIndex = at;
    const match = search.pattern.exec(text);
    if (!match) continue;
    try {
      return JSON.parse(match[1] as string) as unknown;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** Token counts from an engine's `usage` object; undefined when it has neither prompt nor total tokens. */
export function toUsage(value: unknown): Usage | undefined {
  if (!value || typeof value !== 'object') return undefined;
  const usage = value as { prompt_tokens?: unknown; completion_tokens?: unknown; total_tokens?: unknown };
  const count = (n: unknown) => (typeof n === 'number' && Number.isFinite(n) && n >= 0 ? Math.floor(n) : undefined);
  const promptTokens = count(usage.prompt_tokens);
  const completionTokens = count(usage.completion_tokens) ?? 0;
  const totalTokens = count(usage.total_tokens);
  if (promptTokens === undefined && totalTokens === undefined) return undefined;
  return { promptTokens: promptTokens ?? 0, completionTokens, totalTokens: totalTokens ?? (promptTokens ?? 0) + completionTokens };
}
