import { randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import busboy, { type Busboy } from 'busboy';
import type { Request } from 'express';
import { AppError } from '../errors.ts';

/** The text parts of a transcription request (spec: CreateTranscriptionRequest); `file` is the one file part. */
const FIELDS = new Set(['model', 'language', 'prompt', 'response_format', 'temperature']);
const RESPONSE_FORMATS = new Set(['json', 'text', 'srt', 'verbose_json', 'vtt']);
/** Largest text part (`prompt` is the long one). */
const FIELD_MAX_BYTES = 16 * 1024;

type Part =
  | { kind: 'field'; name: string; value: string; truncated: boolean }
  | { kind: 'file'; name: string; filename: string; mimeType: string; stream: Readable };

const invalid = (message: string, param?: string) => new AppError('VALIDATION_FAILED', message, { inference: { code: 'invalid_parameter', ...(param ? { param } : {}) } });
const malformed = (message: string) => new AppError('MALFORMED_REQUEST', message, { inference: { code: 'invalid_json' } });
const missing = (field: string) =>
  new AppError('VALIDATION_FAILED', `\`${field}\` is required.`, { inference: { code: 'missing_required_parameter', param: field } });

/**
 * A transcription upload, parsed as it arrives (busboy) and rebuilt for the engine from the parts
 * that were checked: each documented field at most once, nothing else, only `file` carries a file,
 * `model` rewritten to the engine's uid. The file is never held in memory: when `model` comes
 * before `file`, the file streams straight through to the engine; when `file` comes first (the
 * openai Node SDK sends parts in the order of the object's keys), it is spooled to a temporary file,
 * at most `limitBytes`, deleted when the request ends, until the form is complete. Parts after the
 * file are checked and appended as they come; a bad one aborts the upload to the engine before its
 * closing boundary, so the engine never gets a complete form.
 */
export class TranscriptionForm {
  readonly #reader: PartReader;
  readonly #fields = new Map<string, string>();
  readonly #boundary = `mds-${randomBytes(18).toString('hex')}`;
  #spoolDir: string | undefined;
  #spooled: { file: string; filename: string; mimeType: string } | undefined;
  #live: Extract<Part, { kind: 'file' }> | undefined;
  #fileSeen = false;

  private constructor(req: Request, limitBytes: number) {
    this.#reader = new PartReader(req, limitBytes);
  }

  /**
   * Reads the form until its file starts with `model` known, or to its end; everything read is
   * checked. Then `model` is the caller's and `body()` the form to send on.
   */
  static async open(req: Request, limitBytes: number): Promise<TranscriptionForm> {
    const form = new TranscriptionForm(req, limitBytes);
    try {
      await form.#readHead();
    } catch (error) {
      await form.dispose();
      throw error;
    }
    return form;
  }

  get model(): string {
    return this.#fields.get('model') as string;
  }

  /** The `response_format` the client sent, once its part was read (the whole form is read before the engine answers). */
  get responseFormat(): string | undefined {
    return this.#fields.get('response_format');
  }

  get contentType(): string {
    return `multipart/form-data; boundary=${this.#boundary}`;
  }

  /**
   * The form for the engine, `model` replaced by `engineModel` and `response_format` by
   * `engineFormat` of it; it reads the rest of the upload as it is sent.
   */
  body(engineModel: string, engineFormat: (format: string) => string = (format) => format): Readable {
    return Readable.from(this.#outgoing(engineModel, engineFormat), { objectMode: false });
  }

  /** Stops reading the upload and deletes the spooled file, if any. */
  async dispose(): Promise<void> {
    this.#reader.dispose();
    if (this.#spoolDir) await rm(this.#spoolDir, { recursive: true, force: true });
  }

  async #readHead(): Promise<void> {
    for (let part = await this.#reader.next(); part; part = await this.#reader.next()) {
      if (part.kind === 'field') {
        this.#accept(part);
        continue;
      }
      this.#acceptFile(part);
      if (this.#fields.has('model')) {
        this.#live = part;
        return;
      }
      await this.#spool(part);
    }
    this.#complete();
  }

  async *#outgoing(engineModel: string, engineFormat: (format: string) => string): AsyncGenerator<Buffer> {
    const outgoing = (name: string, value: string) => this.#fieldPart(name, name === 'response_format' ? engineFormat(value) : value);
    yield this.#fieldPart('model', engineModel);
    for (const [name, value] of this.#fields) if (name !== 'model') yield outgoing(name, value);
    if (this.#spooled) {
      yield this.#fileHead(this.#spooled.filename, this.#spooled.mimeType);
      yield* createReadStream(this.#spooled.file) as AsyncIterable<Buffer>;
      yield Buffer.from('\r\n');
    } else if (this.#live) {
      yield this.#fileHead(this.#live.filename, this.#live.mimeType);
      yield* this.#reader.counted(this.#live.stream);
      yield Buffer.from('\r\n');
      // Parts after the file: checked, then appended.
      for (let part = await this.#reader.next(); part; part = await this.#reader.next()) {
        if (part.kind === 'file') this.#acceptFile(part);
        else {
          this.#accept(part);
          yield outgoing(part.name, part.value);
        }
      }
      this.#complete();
    }
    yield Buffer.from(`--${this.#boundary}--\r\n`);
  }

  #accept(part: Extract<Part, { kind: 'field' }>): void {
    const { name, value } = part;
    if (name === 'file') throw invalid('`file` must be a file part (with a filename).', 'file');
    if (!FIELDS.has(name)) throw invalid(`Unknown part \`${printable(name)}\`; a transcription accepts file, model, language, prompt, response_format and temperature.`);
    if (this.#fields.has(name)) throw invalid(`\`${name}\` may be sent only once.`, name);
    if (part.truncated) throw invalid(`\`${name}\` is longer than ${FIELD_MAX_BYTES / 1024} KiB.`, name);
    if (value.includes('\u0000')) throw invalid(`\`${name}\` must not contain NUL characters.`, name);
    if (name === 'model' && (value.length < 1 || value.length > 255)) throw invalid('`model` must be 1 to 255 characters.', 'model');
    if (name === 'response_format' && !RESPONSE_FORMATS.has(value)) throw invalid('`response_format` must be json, text, srt, verbose_json or vtt.', name);
    if (name === 'temperature' && !(value.trim() !== '' && Number(value) >= 0 && Number(value) <= 1)) throw invalid('`temperature` must be a number from 0 to 1.', name);
    this.#fields.set(name, value);
  }

  #acceptFile(part: Extract<Part, { kind: 'file' }>): void {
    if (part.name !== 'file') throw invalid(`Only \`file\` may carry a file; \`${printable(part.name)}\` did.`);
    if (this.#fileSeen) throw invalid('`file` may be sent only once.', 'file');
    this.#fileSeen = true;
  }

  #complete(): void {
    if (!this.#fields.has('model')) throw missing('model');
    if (!this.#fileSeen) throw missing('file');
  }

  async #spool(part: Extract<Part, { kind: 'file' }>): Promise<void> {
    this.#spoolDir = await mkdtemp(path.join(tmpdir(), 'mds-upload-'));
    const file = path.join(this.#spoolDir, 'audio');
    await pipeline(Readable.from(this.#reader.counted(part.stream)), createWriteStream(file, { mode: 0o600 }));
    this.#spooled = { file, filename: part.filename, mimeType: part.mimeType };
  }

  #fieldPart(name: string, value: string): Buffer {
    return Buffer.from(`--${this.#boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`);
  }

  #fileHead(filename: string, mimeType: string): Buffer {
    const safeName = filename.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 128) || 'audio';
    const safeType = /^[\w.+-]+\/[\w.+-]+$/.test(mimeType) ? mimeType : 'application/octet-stream';
    return Buffer.from(`--${this.#boundary}\r\nContent-Disposition: form-data; name="file"; filename="${safeName}"\r\nContent-Type: ${safeType}\r\n\r\n`);
  }
}

function printable(name: string): string {
  return name.replace(/[^\x20-\x7e]/g, '?').slice(0, 64);
}

/** busboy's events as a pull-based sequence of parts; a file part must be read before the next part comes. */
class PartReader {
  readonly #req: Request;
  readonly #parser: Busboy;
  readonly #limitBytes: number;
  readonly #queue: Array<Part | AppError | null> = [];
  #wake: (() => void) | undefined;
  #file: Readable | undefined;
  #bytes = 0;
  #done = false;

  constructor(req: Request, limitBytes: number) {
    this.#req = req;
    this.#limitBytes = limitBytes;
    try {
      this.#parser = busboy({
        headers: req.headers,
        limits: { fields: FIELDS.size, files: 1, parts: FIELDS.size + 1, fieldSize: FIELD_MAX_BYTES, fileSize: limitBytes + 1, headerPairs: 16 },
      });
    } catch {
      throw malformed('Send the audio as multipart/form-data (with a boundary).');
    }
    const parser = this.#parser;
    parser.on('field', (name: string | undefined, value: string, info: { nameTruncated: boolean; valueTruncated: boolean }) =>
      this.#push({ kind: 'field', name: name ?? '', value, truncated: info.nameTruncated || info.valueTruncated }),
    );
    parser.on('file', (name: string | undefined, stream: Readable, info: { filename?: string; mimeType: string }) => {
      // Its reader sees failures through iteration; a part refused before it is read must not throw.
      stream.on('error', () => undefined);
      this.#file = stream;
      this.#push({ kind: 'file', name: name ?? '', filename: info.filename ?? '', mimeType: info.mimeType, stream });
    });
    parser.on('finish', () => this.#push(null));
    parser.on('error', () => this.#fail(malformed('The multipart body is malformed.')));
    for (const limit of ['partsLimit', 'filesLimit', 'fieldsLimit']) {
      parser.on(limit, () => this.#fail(invalid('Too many parts; a transcription has one `file` and each other field at most once.')));
    }
    req.once('close', () => {
      if (!req.complete) this.#fail(malformed('The upload ended before the form was complete.'));
    });
    // The whole body counts against the limit, its preamble and epilogue too: busboy reads and drops them.
    req.on('data', this.#countBody);
    req.pipe(parser);
  }

  async next(): Promise<Part | null> {
    while (this.#queue.length === 0) await new Promise<void>((resolve) => (this.#wake = resolve));
    const item = this.#queue.shift() as Part | AppError | null;
    if (item instanceof AppError) throw item;
    return item;
  }

  /** The bytes of a file part, refused once the upload is over the limit. */
  async *counted(stream: Readable): AsyncGenerator<Buffer> {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      if (this.#bytes > this.#limitBytes) throw this.#tooLarge();
      yield chunk;
    }
  }

  dispose(): void {
    if (this.#done) return;
    this.#done = true;
    this.#req.off('data', this.#countBody);
    this.#req.unpipe(this.#parser);
    this.#parser.removeAllListeners();
    this.#parser.on('error', () => undefined);
    this.#parser.destroy();
  }

  /** Counts every byte read from the request; over the limit, the form fails and reading stops. */
  readonly #countBody = (chunk: Buffer): void => {
    this.#bytes += chunk.length;
    if (this.#bytes <= this.#limitBytes) return;
    this.#fail(this.#tooLarge());
    this.dispose();
  };

  #tooLarge(): AppError {
    return new AppError('PAYLOAD_TOO_LARGE', `The upload is larger than ${this.#limitBytes / 1024 / 1024} MiB.`, { inference: { code: 'request_too_large' } });
  }

  #push(item: Part | AppError | null): void {
    this.#queue.push(item);
    this.#wake?.();
  }

  /** A failure reaches the reader of the current file part as well as the next `next()`. */
  #fail(error: AppError): void {
    if (this.#file && !this.#file.readableEnded) this.#file.destroy(error);
    this.#push(error);
  }
}
