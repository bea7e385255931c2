/**
 * Rewrites a JSON answer as it streams through the proxy, without holding it: the document is
 * re-serialised token by token (insignificant whitespace dropped), and a policy decides, for each
 * value as it starts, to keep it, drop it (with its key), re-key a string and put a prefix before
 * it, or turn an array of numbers into a base64 string of little-endian float32. Strings are copied
 * in their escaped form as they arrive, so a long one (a base64 image) is never held whole.
 *
 * It re-serialises what it is given and does not validate it: the engine's answers are JSON.
 */

/** Where a value sits: the keys and array indices from the root, e.g. `['data', 0, 'embedding']`. */
export type JsonPath = readonly (string | number)[];

export type ValueAction =
  | { kind: 'keep' }
  /** Omit the value, and its key in an object (or its place in an array). */
  | { kind: 'drop' }
  /** An array of numbers becomes one base64 string of their little-endian float32 bytes. */
  | { kind: 'float32-base64' }
  /**
   * A string value, under `key` when given; `prefix` is computed from its first `head` characters
   * (escaped form) and written before them.
   */
  | { kind: 'string'; key?: string; head: number; prefix: (head: string) => string };

/** Decides each value's fate from its path and first character (`{`, `[`, `"`, or a number's or literal's first). */
export type RewritePolicy = (path: JsonPath, first: string) => ValueAction;

const KEEP: ValueAction = { kind: 'keep' };
/** Longest key kept in full (longer ones are compared by their start). */
const KEY_MAX = 256;

interface Frame {
  kind: 'object' | 'array';
  /** The path of this container. */
  path: (string | number)[];
  /** Values written into it so far (for commas). */
  written: number;
  /** Index of the next element (arrays). */
  index: number;
  /** The key of the member whose value comes next (objects). */
  key: string | undefined;
  /** A key is expected next (objects). */
  expectKey: boolean;
  /** Nothing of this container reaches the output. */
  dropped: boolean;
  /** Numbers in it become float32 bytes. */
  floats: Float32Base64 | undefined;
}

interface OpenScalar {
  text: string;
  dropped: boolean;
}

interface OpenString {
  isKey: boolean;
  dropped: boolean;
  text: string;
  escaped: boolean;
  /** Characters still held back for a prefix, and how the prefix is made. */
  head: { size: number; prefix: (head: string) => string } | undefined;
}

export class JsonStreamRewriter {
  readonly #policy: RewritePolicy;
  readonly #stack: Frame[] = [];
  #string: OpenString | undefined;
  /** A number or literal being read, and whether it is dropped. */
  #scalar: OpenScalar | undefined;
  #out: string[] = [];

  constructor(policy: RewritePolicy) {
    this.#policy = policy;
  }

  /** Takes the next piece of the document (decoded text); returns what to send for it. */
  write(text: string): string {
    let i = 0;
    const n = text.length;
    while (i < n) {
      if (this.#string) {
        i = this.#stringPart(text, i);
        continue;
      }
      const floats = this.#scalar ? undefined : this.#top()?.floats;
      if (floats) {
        const next = this.#floatRun(text, i, floats);
        if (next !== i) {
          i = next;
          continue;
        }
      }
      const c = text[i] as string;
      if (this.#scalar) {
        if (!isDelimiter(c)) {
          let j = i + 1;
          while (j < n && !isDelimiter(text[j] as string)) j++;
          this.#scalar.text += text.slice(i, j);
          i = j;
          continue;
        }
        this.#endScalar();
      }
      i++;
      switch (c) {
        case ' ':
        case '\t':
        case '\n':
        case '\r':
        case ':':
        case ',':
          break;
        case '{':
        case '[':
          this.#open(c);
          break;
        case '}':
        case ']':
          this.#close();
          break;
        case '"': {
          const frame = this.#top();
          if (frame?.kind === 'object' && frame.expectKey) {
            this.#string = { isKey: true, dropped: frame.dropped, text: '', escaped: false, head: undefined };
          } else {
            this.#openString();
          }
          break;
        }
        default:
          this.#scalar = { text: c, dropped: this.#startValue(c) === 'dropped' };
      }
    }
    return this.#flush();
  }

  /** The document ended: writes a number or literal still open at the top level. */
  end(): string {
    if (this.#scalar) this.#endScalar();
    return this.#flush();
  }

  #flush(): string {
    if (this.#out.length === 0) return '';
    const text = this.#out.join('');
    this.#out = [];
    return text;
  }

  #top(): Frame | undefined {
    return this.#stack[this.#stack.length - 1];
  }

  /**
   * A value starts here: asks the policy, writes the comma and key when it is kept, and returns
   * the action (or `dropped` when an enclosing value is dropped or it is a float array's element).
   */
  #startValue(first: string): ValueAction | 'dropped' | 'float' {
    const frame = this.#top();
    if (frame?.floats) return 'float';
    if (frame?.dropped) return 'dropped';
    let path: JsonPath;
    if (!frame) path = [];
    else if (frame.kind === 'array') path = [...frame.path, frame.index++];
    else {
      path = [...frame.path, frame.key ?? ''];
      frame.expectKey = true;
    }
    const action = this.#policy(path, first);
    if (action.kind === 'drop') return 'dropped';
    if (frame) {
      if (frame.written++ > 0) this.#out.push(',');
      if (frame.kind === 'object') {
        const key = action.kind === 'string' && action.key !== undefined ? action.key : (frame.key ?? '');
        this.#out.push(`"${key}":`);
      }
    }
    return action;
  }

  #pathOf(frame: Frame | undefined): (string | number)[] {
    if (!frame) return [];
    return frame.kind === 'array' ? [...frame.path, frame.index - 1] : [...frame.path, frame.key ?? ''];
  }

  #open(bracket: '{' | '['): void {
    const parent = this.#top();
    const action = this.#startValue(bracket);
    const dropped = action === 'dropped' || action === 'float';
    const floats = !dropped && action.kind === 'float32-base64' && bracket === '[' ? new Float32Base64() : undefined;
    this.#stack.push({
      kind: bracket === '{' ? 'object' : 'array',
      path: this.#pathOf(parent),
      written: 0,
      index: 0,
      key: undefined,
      expectKey: bracket === '{',
      dropped,
      floats,
    });
    if (floats) this.#out.push('"');
    else if (!dropped) this.#out.push(bracket);
  }

  #close(): void {
    const frame = this.#stack.pop();
    if (!frame) return;
    if (frame.floats) this.#out.push(frame.floats.end(), '"');
    else if (!frame.dropped) this.#out.push(frame.kind === 'object' ? '}' : ']');
  }

  #openString(): void {
    const action = this.#startValue('"');
    const dropped = action === 'dropped' || action === 'float';
    const head = !dropped && action.kind === 'string' ? { size: action.head, prefix: action.prefix } : undefined;
    this.#string = { isKey: false, dropped, text: '', escaped: false, head };
    if (!dropped) this.#out.push('"');
  }

  /** Reads string content from `i`; returns where it stopped (after the closing quote, or the end). */
  #stringPart(text: string, i: number): number {
    const open = this.#string as OpenString;
    let j = i;
    let closed = false;
    // Next quote and backslash at or after j, each searched again only once passed.
    let quote = -2;
    let slash = -2;
    while (j < text.length) {
      if (open.escaped) {
        open.escaped = false;
        j++;
        continue;
      }
      if (quote !== -1 && quote < j) quote = text.indexOf('"', j);
      if (slash !== -1 && slash < j) slash = text.indexOf('\\', j);
      if (slash !== -1 && (quote === -1 || slash < quote)) {
        open.escaped = true;
        j = slash + 1;
        continue;
      }
      if (quote === -1) {
        j = text.length;
        break;
      }
      j = quote;
      closed = true;
      break;
    }
    const piece = text.slice(i, j);
    if (open.isKey) {
      if (open.text.length < KEY_MAX) open.text += piece.slice(0, KEY_MAX - open.text.length);
    } else if (!open.dropped) {
      if (open.head) {
        open.text += piece;
        if (open.text.length >= open.head.size || closed) this.#releaseHead(open);
      } else {
        this.#out.push(piece);
      }
    }
    if (!closed) return j;
    this.#string = undefined;
    if (open.isKey) {
      const frame = this.#top() as Frame;
      frame.key = open.text;
      frame.expectKey = false;
    } else if (!open.dropped) {
      this.#out.push('"');
    }
    return j + 1;
  }

  #releaseHead(open: OpenString): void {
    const head = open.head as NonNullable<OpenString['head']>;
    this.#out.push(head.prefix(open.text.slice(0, head.size)), open.text);
    open.head = undefined;
    open.text = '';
  }

  /**
   * The numbers of a float array in this piece: the complete ones parsed at once by the native
   * JSON parser, up to the array's end or the last comma of the piece (what follows is a number cut
   * by the piece's end, or anything else, left to the main loop). Returns where it stopped.
   */
  #floatRun(text: string, from: number, floats: Float32Base64): number {
    let i = from;
    while (i < text.length && (text.charCodeAt(i) === COMMA || WHITESPACE[text.charCodeAt(i)])) i++;
    const close = text.indexOf(']', i);
    const end = close === -1 ? text.lastIndexOf(',') : close;
    if (end <= i) return i;
    const run = text.slice(i, end);
    let values: unknown;
    try {
      values = /[[{"]/.test(run) ? undefined : JSON.parse(`[${run}]`);
    } catch {
      // Python's NaN and Infinity are not JSON: the main loop reads those one by one.
      values = undefined;
    }
    if (!Array.isArray(values)) return i;
    for (const value of values as number[]) {
      const encoded = floats.add(value);
      if (encoded) this.#out.push(encoded);
    }
    return end;
  }

  #endScalar(): void {
    const scalar = this.#scalar as OpenScalar;
    this.#scalar = undefined;
    const frame = this.#top();
    if (frame?.floats) {
      const encoded = frame.floats.add(Number(scalar.text));
      if (encoded) this.#out.push(encoded);
      return;
    }
    if (!scalar.dropped) this.#out.push(scalar.text);
  }
}

const COMMA = 0x2c;
/** Character codes that end a number or literal. */
const DELIMITER = new Uint8Array(128);
const WHITESPACE = new Uint8Array(128);
for (const c of ',}]:"{[ \n\r\t') DELIMITER[c.charCodeAt(0)] = 1;
for (const c of ' \n\r\t') WHITESPACE[c.charCodeAt(0)] = 1;

function isDelimiter(c: string): boolean {
  return DELIMITER[c.charCodeAt(0)] === 1;
}

/** Little-endian float32 bytes as base64, written in whole groups of three bytes as they fill. */
class Float32Base64 {
  /** 768 floats: a multiple of 3 bytes, so that the pieces join without padding. */
  readonly #bytes = Buffer.alloc(3 * 1024);
  readonly #view = new DataView(this.#bytes.buffer, this.#bytes.byteOffset, this.#bytes.length);
  #length = 0;

  add(value: number): string {
    this.#view.setFloat32(this.#length, value, true);
    this.#length += 4;
    if (this.#length < this.#bytes.length) return '';
    this.#length = 0;
    return this.#bytes.toString('base64');
  }

  end(): string {
    const rest = this.#bytes.toString('base64', 0, this.#length);
    this.#length = 0;
    return rest;
  }
}

/**
 * `policy`, and the engine's `model_replica` (which of its replicas answered, an engine internal that
 * OpenAI's answers do not have) dropped from the top of the answer.
 */
export function withoutReplica(policy: RewritePolicy = () => KEEP): RewritePolicy {
  return (path, first) => (path.length === 1 && path[0] === 'model_replica' ? { kind: 'drop' } : policy(path, first));
}

/** OpenAI's `encoding_format: "base64"`: each `data[i].embedding` array as base64 of little-endian float32. */
export const embeddingsAsBase64: RewritePolicy = (path, first) =>
  path.length === 3 && path[0] === 'data' && path[2] === 'embedding' && first === '[' ? { kind: 'float32-base64' } : KEEP;

/**
 * Images asked of the engine as `b64_json`: each `data[i]` loses `url` (Xinference's is a path on
 * the worker's disk, or null); with `as: 'url'` its `b64_json` becomes `url`, a `data:` URL whose
 * media type is read from the image's first bytes.
 */
export function imagesAs(as: 'url' | 'b64_json'): RewritePolicy {
  return (path, first) => {
    if (path.length !== 3 || path[0] !== 'data') return KEEP;
    if (path[2] === 'url') return { kind: 'drop' };
    if (path[2] !== 'b64_json') return KEEP;
    if (first !== '"') return { kind: 'drop' };
    if (as === 'b64_json') return KEEP;
    return { kind: 'string', key: 'url', head: 16, prefix: (head) => `data:${imageMediaType(Buffer.from(head.replaceAll('\\/', '/'), 'base64'))};base64,` };
  };
}

const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** The media type of an image from its first bytes (PNG, JPEG, WebP, GIF); `application/octet-stream` otherwise. */
export function imageMediaType(bytes: Buffer): string {
  if (bytes.length >= 8 && bytes.subarray(0, 8).equals(PNG)) return 'image/png';
  if (bytes.length >= 3 && bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return 'image/jpeg';
  if (bytes.length >= 12 && bytes.toString('latin1', 0, 4) === 'RIFF' && bytes.toString('latin1', 8, 12) === 'WEBP') return 'image/webp';
  if (bytes.length >= 6 && /^GIF8[79]a$/.test(bytes.toString('latin1', 0, 6))) return 'image/gif';
  return 'application/octet-stream';
}
