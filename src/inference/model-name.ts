/**
 * The name the caller asked for, in place of the engine's model uid, in an answer as it streams.
 * The engine names the model by its uid (`dep-5ae01c71…`, `hosted-qwen2.5-instruct`) in `model`,
 * in every chunk of a stream and in embeddings; the uid changes on every redeploy, and callers log,
 * cache and route on that field. OpenAI, vLLM and LiteLLM answer with the name they were sent.
 *
 * The answer is JSON (or JSON events), so the uid can only appear as a whole string token
 * `"<uid>"` (a quote inside a string is escaped as `\"`): each such token becomes the caller's
 * name, and nothing else is touched. Chunks pass through unchanged (the same buffer) where the
 * token is absent; the bytes at a chunk's end that may begin the token are held for the next one.
 */
export class ModelNameSwap {
  readonly #token: Buffer;
  readonly #replacement: Buffer;
  /** The start of a token cut by the previous chunk's end. */
  #held: Buffer | undefined;
  /** The previous chunk ended in an odd run of backslashes: its next byte is escaped. */
  #escapedNext = false;

  constructor(engineUid: string, callerName: string) {
    this.#token = Buffer.from(JSON.stringify(engineUid));
    this.#replacement = Buffer.from(JSON.stringify(callerName));
  }

  push(chunk: Buffer): Buffer {
    const held = this.#held;
    const startsEscaped = this.#escapedNext;
    const data = held ? Buffer.concat([held, chunk]) : chunk;
    const token = this.#token;
    const pieces: Buffer[] = [];
    let from = 0;
    for (let at = data.indexOf(token); at !== -1; at = data.indexOf(token, at + token.length)) {
      if (isEscaped(data, at, startsEscaped)) continue;
      pieces.push(data.subarray(from, at), this.#replacement);
      from = at + token.length;
    }
    const keep = from + heldTail(data, from, token, startsEscaped);
    this.#held = keep < data.length ? Buffer.from(data.subarray(keep)) : undefined;
    this.#escapedNext = this.#held ? false : isEscaped(data, data.length, startsEscaped);
    if (pieces.length === 0) return keep === data.length ? data : data.subarray(0, keep);
    pieces.push(data.subarray(from, keep));
    return Buffer.concat(pieces);
  }

  /** The answer ended: what was held is sent as it is. */
  end(): Buffer {
    const rest = this.#held ?? Buffer.alloc(0);
    this.#held = undefined;
    return rest;
  }
}

const BACKSLASH = 0x5c;
const QUOTE = 0x22;

/** Whether the byte at `at` is escaped: an odd run of backslashes before it (carried over from the previous chunk at 0). */
function isEscaped(data: Buffer, at: number, startsEscaped: boolean): boolean {
  let i = at - 1;
  while (i >= 0 && data[i] === BACKSLASH) i--;
  const run = at - 1 - i;
  return i < 0 ? (run % 2 === 1) !== startsEscaped : run % 2 === 1;
}

/**
 * How many bytes after `from` go out now: all but a tail that begins the token (an unescaped quote,
 * and what follows it matching the token's start), which waits for the next chunk.
 */
function heldTail(data: Buffer, from: number, token: Buffer, startsEscaped: boolean): number {
  const start = Math.max(from, data.length - token.length + 1);
  for (let at = data.indexOf(QUOTE, start); at !== -1; at = data.indexOf(QUOTE, at + 1)) {
    if (token.subarray(0, data.length - at).equals(data.subarray(at)) && !isEscaped(data, at, startsEscaped)) return at - from;
  }
  return data.length - from;
}
