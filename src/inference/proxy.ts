import type { IncomingHttpHeaders } from 'node:http';
import { Readable, Transform, type TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Request, Response } from 'express';
import got, { type Got } from 'got';
import { AppError } from '../errors.ts';
import type { Target } from './routing.ts';

export interface Usage {
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
}

/** Upstream limits: a connection within 5 s, a first byte within 10 minutes (long generations). */
const TIMEOUTS = { connect: 5_000, response: 600_000 } as const;
/** How much of a JSON answer is kept to read its `usage`, and of a stream's end. */
const JSON_KEEP = 1024 * 1024;
const STREAM_TAIL = 8 * 1024;

const http: Got = got.extend({
  retry: { limit: 0 },
  throwHttpErrors: false,
  decompress: false,
  timeout: TIMEOUTS,
  followRedirect: false,
});

/**
 * Streams one inference request to the engine and its answer back as it arrives: no buffering, no
 * compression on the way, backpressure through the pipeline, the upstream request aborted when
 * the client leaves. Engine failures become the hosted-inference error shape. Resolves with the
 * usage the answer reported (the JSON body's, or the last stream chunk's), if any.
 */
export async function forward(input: {
  req: Request;
  res: Response;
  target: Target;
  path: string;
  body: string | Readable;
  contentType: string;
}): Promise<Usage | undefined> {
  const { req, res, target } = input;
  const upstream = http.stream.post(`${target.endpoint}${input.path}`, {
    body: input.body,
    headers: {
      'content-type': input.contentType,
      accept: req.get('accept') ?? '*/*',
      ...(target.authorization ? { authorization: target.authorization } : {}),
    },
  });
  // A client that leaves before the answer is complete aborts the engine's work; `close` also
  // follows a completed answer, which must not abort anything.
  const abort = () => {
    if (!res.writableFinished) upstream.destroy();
  };
  res.once('close', abort);

  try {
    const response = await new Promise<{ statusCode: number; headers: IncomingHttpHeaders }>((resolve, reject) => {
      upstream.once('response', resolve);
      upstream.once('error', reject);
    });
    if (response.statusCode >= 400) {
      throw engineError(response.statusCode, response.headers, await readSome(upstream, 64 * 1024));
    }
    const contentType = String(response.headers['content-type'] ?? 'application/json');
    const streaming = contentType.startsWith('text/event-stream');
    res.status(response.statusCode).set('Content-Type', contentType);
    if (streaming) res.set({ 'Cache-Control': 'no-cache', 'X-Accel-Buffering': 'no' });
    res.flushHeaders();
    const tap = new UsageTap(streaming ? STREAM_TAIL : JSON_KEEP, streaming);
    await pipeline(upstream, tap, res);
    return tap.usage();
  } catch (error) {
    // got wraps what the request body stream threw (e.g. an upload over its limit).
    const own = error instanceof AppError ? error : (error as { cause?: unknown }).cause;
    if (own instanceof AppError) throw own;
    if (res.headersSent || req.destroyed) {
      // Too late for an error answer: the client left, or the engine failed mid-stream.
      res.destroy();
      return undefined;
    }
    const code = (error as { code?: string }).code;
    if (code === 'ETIMEDOUT') {
      throw new AppError('SERVICE_UNAVAILABLE', 'The model did not answer in time.', { inference: { code: 'upstream_timeout', status: 504 } });
    }
    throw new AppError('SERVICE_UNAVAILABLE', 'The model could not be reached.', { inference: { code: 'upstream_error', status: 502 } });
  } finally {
    res.off('close', abort);
  }
}

/** The engine's refusal, as the hosted-inference error the client parses. */
function engineError(status: number, headers: IncomingHttpHeaders, body: string): AppError {
  let message = body.slice(0, 500);
  try {
    const parsed = JSON.parse(body) as { detail?: unknown; error?: { message?: string } };
    message = String(parsed.error?.message ?? parsed.detail ?? message);
  } catch {
    // Not JSON: keep the text.
  }
  if (status === 503) {
    return new AppError('SERVICE_UNAVAILABLE', `The model is not ready: ${message}`, {
      headers: { 'Retry-After': String(headers['retry-after'] ?? 10) },
      inference: { code: 'engine_overloaded', status: 503 },
    });
  }
  if (status >= 500 || status === 404) {
    return new AppError('SERVICE_UNAVAILABLE', `The model failed: ${message}`, { inference: { code: 'upstream_error', status: 502 } });
  }
  return new AppError('VALIDATION_FAILED', message, { inference: { code: 'engine_rejected_request', status: 400 } });
}

async function readSome(stream: Readable, limit: number): Promise<string> {
  let text = '';
  for await (const chunk of stream) {
    text += String(chunk);
    if (text.length >= limit) break;
  }
  return text.slice(0, limit);
}

/** Passes bytes through unchanged and keeps enough of them to read the answer's `usage`. */
class UsageTap extends Transform {
  #kept = '';
  readonly #limit: number;
  readonly #tailOnly: boolean;

  constructor(limit: number, tailOnly: boolean) {
    super();
    this.#limit = limit;
    this.#tailOnly = tailOnly;
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    if (this.#tailOnly) {
      this.#kept = (this.#kept + chunk.toString('utf8')).slice(-this.#limit);
    } else if (this.#kept.length < this.#limit) {
      this.#kept += chunk.toString('utf8');
    }
    callback(null, chunk);
  }

  usage(): Usage | undefined {
    const source = this.#tailOnly ? lastUsageEvent(this.#kept) : this.#kept;
    if (!source) return undefined;
    try {
      const usage = (JSON.parse(source) as { usage?: { prompt_tokens?: number; completion_tokens?: number; total_tokens?: number } | null }).usage;
      if (!usage) return undefined;
      const promptTokens = usage.prompt_tokens ?? 0;
      const completionTokens = usage.completion_tokens ?? 0;
      return { promptTokens, completionTokens, totalTokens: usage.total_tokens ?? promptTokens + completionTokens };
    } catch {
      return undefined;
    }
  }
}

/** The JSON of the last `data:` event that carries a `usage`. */
function lastUsageEvent(tail: string): string | undefined {
  const events = tail.split(/\r?\n\r?\n/).reverse();
  const event = events.find((e) => e.startsWith('data: {') && e.includes('"usage"'));
  return event?.slice('data: '.length);
}

/**
 * Reads a multipart body up to and including its `model` field, without reading the rest: returns
 * the model and a stream of the whole body with the model replaced, the file still streaming.
 */
export async function multipartWithModel(
  req: Request,
  replace: (model: string) => Promise<string>,
  limitBytes: number,
): Promise<{ model: string; body: Readable; contentType: string }> {
  const contentType = req.get('content-type') ?? '';
  const boundary = /boundary=(?:"([^"]+)"|([^;]+))/i.exec(contentType);
  if (!contentType.startsWith('multipart/form-data') || !boundary) {
    throw new AppError('MALFORMED_REQUEST', 'Send the audio as multipart/form-data.', { inference: { code: 'invalid_json' } });
  }
  const delimiter = Buffer.from(`\r\n--${boundary[1] ?? boundary[2]}`);
  const iterator = req[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  let head = Buffer.alloc(0);
  let found: { start: number; end: number } | undefined;
  while (!found) {
    const next = await iterator.next();
    if (next.done) {
      throw new AppError('VALIDATION_FAILED', '`model` is required.', { inference: { code: 'missing_required_parameter', param: 'model' } });
    }
    head = Buffer.concat([head, next.value]);
    if (head.length > limitBytes) throw tooLarge(limitBytes);
    found = modelValue(head, delimiter);
  }
  const model = head.subarray(found.start, found.end).toString('utf8').trim();
  const rewritten = Buffer.concat([head.subarray(0, found.start), Buffer.from(await replace(model)), head.subarray(found.end)]);
  let sent = head.length;
  const body = Readable.from(
    (async function* rest() {
      yield rewritten;
      for (let next = await iterator.next(); !next.done; next = await iterator.next()) {
        sent += next.value.length;
        if (sent > limitBytes) throw tooLarge(limitBytes);
        yield next.value;
      }
    })(),
    { objectMode: false },
  );
  return { model, body, contentType };
}

function modelValue(head: Buffer, delimiter: Buffer): { start: number; end: number } | undefined {
  const header = head.indexOf('name="model"');
  if (header < 0) return undefined;
  const start = head.indexOf('\r\n\r\n', header);
  if (start < 0) return undefined;
  const end = head.indexOf(delimiter, start + 4);
  return end < 0 ? undefined : { start: start + 4, end };
}

function tooLarge(limitBytes: number): AppError {
  return new AppError('PAYLOAD_TOO_LARGE', `The upload is larger than ${limitBytes / 1024 / 1024} MiB.`, { inference: { code: 'request_too_large' } });
}
