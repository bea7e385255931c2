/**
 * Token counts where the engine reported none: a client that left before the answer (the engine
 * still read the prompt), a stream cut short before its usage chunk, an engine that reports none.
 * Counted with OpenAI's `cl100k_base` (`gpt-tokenizer`), close to what Llama 3 and Qwen count. The
 * encoding (about 40 MB) loads on the first estimate; a long text is sampled and scaled, so an
 * estimate costs milliseconds whatever the prompt. Why: docs/decisions/2026-11-23-usage-records.md.
 */

/** Characters counted exactly; a longer text is sampled. */
const SAMPLE_CHARS = 16 * 1024;
const SLICES = 4;
/** Tokens a chat message costs beyond its text (role and separators; OpenAI's cookbook counts 3, plus 3 for the reply's start). */
const PER_MESSAGE = 4;

export type TokenCounter = (text: string) => number;

let loading: Promise<TokenCounter> | undefined;

/** The tokenizer, loaded once per process. */
export function tokenCounter(): Promise<TokenCounter> {
  loading ??= import('gpt-tokenizer/encoding/cl100k_base').then(({ countTokens }) => (text: string) => estimate(countTokens, text));
  return loading;
}

function estimate(count: (text: string) => number, text: string): number {
  if (text.length <= SAMPLE_CHARS) return count(text);
  const slice = SAMPLE_CHARS / SLICES;
  const step = Math.floor((text.length - slice) / (SLICES - 1));
  let tokens = 0;
  for (let i = 0; i < SLICES; i++) tokens += count(text.slice(i * step, i * step + slice));
  return Math.ceil((tokens * text.length) / SAMPLE_CHARS);
}

/** The fields of an inference request the engine reads as its prompt (chat, embeddings, rerank, images). */
const PROMPT_FIELDS = ['messages', 'tools', 'functions', 'input', 'query', 'documents', 'prompt'] as const;

/**
 * The prompt of an inference request in tokens, estimated: the text of its prompt fields (message
 * contents, tool definitions, inputs, the query and documents), each message's overhead, and a
 * token per number of an input given as token ids.
 */
export function promptTokens(body: Record<string, unknown>, count: TokenCounter): number {
  const texts: string[] = [];
  let tokens = 0;
  const walk = (value: unknown, depth: number): void => {
    if (typeof value === 'string') texts.push(value);
    else if (typeof value === 'number') tokens += 1;
    else if (depth < 8 && Array.isArray(value)) for (const item of value) walk(item, depth + 1);
    else if (depth < 8 && value && typeof value === 'object') for (const item of Object.values(value)) walk(item, depth + 1);
  };
  for (const field of PROMPT_FIELDS) walk(body[field], 0);
  if (Array.isArray(body.messages)) tokens += PER_MESSAGE * body.messages.length;
  return tokens + count(texts.join('\n'));
}
