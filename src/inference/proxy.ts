import type { ClientRequest, IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import type { Request, Response } from 'express';
import { AppError } from '../errors.ts';
import { toInferenceError } from '../http/problem.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { AnswerWatch } from './answer-watch.ts';
import type { RequestNote } from './request-metrics.ts';
import { EngineConnections } from './engine-connection.ts';
import { ENGINE_ERROR_READ, engineError, refusesCredential, upstreamFailure, upstreamTimeout } from './engine-errors.ts';
import { ModelNameSwap } from './model-name.ts';
import type { Target } from './routing.ts';

/** The last event of a chat stream. */
const DONE = 'data: [DONE]';

/** The media types an engine's answer may have; anything else is never relayed (502). */
export type MediaType = 'application/json' | 'text/event-stream' | 'text/plain';

/** The Content-Type the client gets for each: set by the proxy, never copied from the engine. */
const CONTENT_TYPE: Record<MediaType, string> = {
  'application/json': 'application/json; charset=utf-8',
  'text/event-stream': 'text/event-stream; charset=utf-8',
  'text/plain': 'text/plain; charset=utf-8',
};

export interface RelayLimits {
  /** To open the connection to the engine. */
  connectTimeoutMs: number;
  /** From sending the request to the first byte of the answer's body. */
  firstByteTimeoutMs: number;
  /** Between two chunks of the answer's body, once it has started. */
  idleTimeoutMs: number;
}

/**
 * A change the proxy makes to the engine's 200 answer on its way to the client, so that the route
 * keeps the contract's promise where the engine answers otherwise (images as data URLs, embeddings
 * as base64, transcripts as text). Its output is what the client gets, as `mediaType`.
 */
export interface AnswerRewrite {
  mediaType: MediaType;
  /** What to send for this chunk of the engine's answer ('' for nothing yet); throws when the answer is unusable. */
  push(chunk: Buffer): string;
  /** The rest, once the engine's answer is complete; throws when the answer is unusable. */
  end(): string;
}

/** Called when the engine refused the cluster's inference credential (401 or 403). */
export type CredentialsRefused = (target: Target, reason: string) => void;

/** What reached the client: the answer in full, or part of it (the client left, the engine failed or stalled). */
export interface Delivery {
  outcome: 'completed' | 'aborted';
  answer: AnswerWatch;
}

/**
 * Relays inference requests to engines: the request streamed up, the answer streamed back as it
 * arrives (no buffering, no compression, backpressure both ways), the upstream request aborted
 * when the client leaves. Engine failures become the hosted-inference error shape with a fixed
 * message (engine-errors.ts); only the documented media types are relayed; an engine that does not
 * accept the connection, or stalls, is cut off by the connect, first-byte and idle timeouts.
 */
export class Relay {
  readonly #engines: EngineConnections;
  readonly #limits: RelayLimits;
  readonly #credentialsRefused: CredentialsRefused;
  readonly #metrics: Metrics | undefined;

  constructor(limits: RelayLimits, credentialsRefused: CredentialsRefused, metrics?: Metrics) {
    this.#limits = limits;
    this.#credentialsRefused = credentialsRefused;
    this.#metrics = metrics;
    this.#engines = new EngineConnections(limits.connectTimeoutMs);
  }

  /**
   * Sends one request to the engine and streams its answer to the client. Throws an AppError when
   * nothing was sent to the client yet; resolves with what was delivered once the answer started,
   * `aborted` with an empty answer when the client left after the whole request reached the engine
   * but before its answer, or `undefined` when it left before that.
   */
  async forward(input: {
    req: Request;
    res: Response;
    target: Target;
    path: string;
    body: string | Readable;
    contentType: string;
    /** The media types the engine may answer with (200), relayed as they are unless `rewrite` changes them. */
    accepts: readonly MediaType[];
    /** Made when the engine's 200 answer arrives (the request, a form included, is then complete). */
    rewrite?: () => AnswerRewrite | undefined;
    /** The engine's model uid and the name the caller asked for, which answers carry instead (model-name.ts). */
    model?: { engineUid: string; asked: string };
    /**
     * Called once the engine's answer is complete, before its last bytes go to the client (the
     * usage's journal, or its group commit): the client never holds a whole answer whose usage is
     * not recorded. Its promise must settle (the recorder's does within a second, a database down).
     */
    beforeEnd?: (answer: AnswerWatch) => Promise<void>;
  }): Promise<Delivery | undefined> {
    const { req, res, body } = input;
    // Upstream latency, time to first chunk and active streams of this route (docs/operating.md: Metrics).
    const measures = this.#metrics?.relay(input.path);
    const sentAt = measures ? performance.now() : 0;
    let stalled = false;
    let timer: NodeJS.Timeout | undefined;
    const watch = (ms: number) => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        stalled = true;
        upstream.destroy(new Error('the engine stalled'));
      }, ms);
    };
    // The route's own media types, never the client's `Accept`: nothing the client writes in a header reaches the engine.
    const headers: Record<string, string | number> = { 'content-type': input.contentType, accept: input.accepts.join(', ') };
    if (input.target.authorization) headers.authorization = input.target.authorization;
    if (typeof body === 'string') headers['content-length'] = Buffer.byteLength(body);
    const upstream = this.#engines.post(input.target.endpoint, input.path, headers);
    // Every failure is handled through the promises below; a late one must not go unhandled.
    upstream.on('error', () => undefined);
    // The first-byte clock starts once the whole request is sent; an upload is watched for gaps.
    if (typeof body === 'string') {
      upstream.end(body);
      watch(this.#limits.firstByteTimeoutMs);
    } else {
      watch(this.#limits.idleTimeoutMs);
      body.on('data', () => watch(this.#limits.idleTimeoutMs));
      body.once('end', () => watch(this.#limits.firstByteTimeoutMs));
      // What the upload stream throws (a part over its limit) fails the request with that error.
      body.once('error', (error) => upstream.destroy(error));
      body.pipe(upstream);
    }

    // A client that leaves before the answer is complete aborts the engine's work; `close` also
    // follows a completed answer, which must not abort anything.
    let clientLeft = false;
    const onClientClose = () => {
      if (res.writableFinished) return;
      clientLeft = true;
      upstream.destroy();
    };
    res.once('close', onClientClose);

    let answerStream: IncomingMessage | undefined;
    measures?.opened();
    try {
      const response = await answerOf(upstream);
      answerStream = response;
      measures?.upstreamLatency((performance.now() - sentAt) / 1000);
      // A failure of the answer's body shows on the request too (it is destroyed with it).
      response.on('error', () => undefined);
      const statusCode = response.statusCode ?? 0;
      if (statusCode >= 400) {
        const refusal = await readSome(response, ENGINE_ERROR_READ);
        const failure = engineError(statusCode, response.headers, refusal, req.log);
        // A 403 about this one model (a key limited to some models) fails the request, not the cluster.
        if (refusesCredential(statusCode, refusal)) {
          this.#credentialsRefused(input.target, `the engine answered ${statusCode} to the cluster's inference API key on ${input.path}`);
        }
        throw failure;
      }
      const media = mediaTypeOf(response.headers['content-type']);
      if (statusCode !== 200 || !media || !input.accepts.includes(media)) {
        req.log.warn({ engine_status: statusCode, engine_content_type: response.headers['content-type'] }, 'the engine answered something the route does not relay');
        upstream.destroy();
        throw upstreamFailure('The model answered in a form this route does not serve.');
      }
      const streaming = media === 'text/event-stream';
      const rewrite = input.rewrite?.();
      const swap = input.model && new ModelNameSwap(input.model.engineUid, input.model.asked);
      res.statusCode = 200;
      res.setHeader('Content-Type', CONTENT_TYPE[rewrite?.mediaType ?? media]);
      if (streaming) {
        // An event stream starts at once.
        res.setHeader('Cache-Control', 'no-cache');
        res.setHeader('X-Accel-Buffering', 'no');
        res.flushHeaders();
      } else if (!rewrite && !swap && response.headers['content-length'] !== undefined) {
        // A JSON or text answer relayed byte for byte keeps its length: headers and body go out in
        // one write, without chunked framing.
        res.setHeader('Content-Length', response.headers['content-length']);
      }
      const answer = new AnswerWatch(streaming);
      // The idle clock runs while the engine owes the next chunk, not while a slow client holds it back.
      // A stream's first chunk is also its time to first token in the request metrics (request-metrics.ts).
      let firstChunk = measures !== undefined || streaming;
      const { ended, held } = await pump(response, res, answer, swap, rewrite, streaming, input.beforeEnd !== undefined, {
        onChunk: () => {
          if (firstChunk) {
            firstChunk = false;
            const now = performance.now();
            measures?.firstChunk((now - sentAt) / 1000);
            if (streaming) (res.locals as RequestNote).metricsFirstChunkAt = now;
          }
          watch(this.#limits.idleTimeoutMs);
        },
        onPause: () => clearTimeout(timer),
      });
      let rest: Buffer | string | undefined = '';
      if (ended === 'completed') {
        const tail = swap?.end();
        if (rewrite) rest = rewritten(() => (tail?.length ? rewrite.push(tail) : '') + rewrite.end(), req);
        else if (tail) rest = tail;
        // Every stream the contract serves ends with `[DONE]` (or an error event), as OpenAI's do;
        // Xinference's completion streams end without it (`api/restful_api.py`, `create_completion`).
        if (streaming && !answer.sawEnd) rest = `${rest}${answer.atEventBoundary ? '' : '\n\n'}${DONE}\n\n`;
      }
      if (ended === 'completed' && rest !== undefined) {
        clearTimeout(timer);
        if (input.beforeEnd) await input.beforeEnd(answer);
        if (held !== undefined) res.write(held);
        res.end(rest);
        return { outcome: 'completed', answer };
      }
      if ((ended === 'unusable' || rest === undefined) && !res.headersSent) {
        res.removeHeader('Content-Type');
        throw upstreamFailure('The model answered in a form this route does not serve.');
      }
      if (ended === 'client-left' || clientLeft) return { outcome: 'aborted', answer };
      const failure = stalled ? upstreamTimeout() : upstreamFailure();
      req.log.warn({ stalled }, 'the engine failed after its answer started');
      if (!res.headersSent) {
        res.removeHeader('Content-Type');
        res.removeHeader('Content-Length');
        throw failure;
      }
      if (streaming && res.writable) {
        // The documented end of a broken stream: one error event, then the end, without [DONE].
        res.end(`${answer.atEventBoundary ? '' : '\n\n'}data: ${JSON.stringify(toInferenceError(failure))}\n\n`);
      } else {
        res.destroy();
      }
      return { outcome: 'aborted', answer };
    } catch (error) {
      if (error instanceof AppError) throw error;
      // The client left (its connection closed) before the answer: nothing to send it, but an engine
      // that read the whole request works on it, so it is metered with no answer. (Not `req.destroyed`,
      // which is true once a request's body has been read.)
      if (clientLeft || res.destroyed) return upstream.writableFinished ? { outcome: 'aborted', answer: new AnswerWatch(false) } : undefined;
      if (stalled || (error as { code?: string }).code === 'ETIMEDOUT') throw upstreamTimeout();
      req.log.warn({ err: String(error) }, 'the engine could not be reached');
      throw upstreamFailure('The model could not be reached.');
    } finally {
      measures?.closed();
      clearTimeout(timer);
      res.off('close', onClientClose);
      // An answer not read to its end (an error page, a refused media type) frees its socket.
      if (answerStream && !answerStream.complete) upstream.destroy();
    }
  }
}

/**
 * The engine's answer, or why there is none. Its listeners go once it settles: the `close` that
 * ends every exchange would otherwise build an error (and its stack) per request for nothing.
 */
function answerOf(upstream: ClientRequest): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const settle = (error: Error | undefined, response?: IncomingMessage) => {
      upstream.off('response', onResponse).off('error', onError).off('close', onClose);
      if (response) resolve(response);
      else reject(error);
    };
    const onResponse = (response: IncomingMessage) => settle(undefined, response);
    const onError = (error: Error) => settle(error);
    const onClose = () => settle(new Error('the engine closed the connection before answering'));
    upstream.once('response', onResponse).once('error', onError).once('close', onClose);
  });
}

function mediaTypeOf(header: string | undefined): MediaType | undefined {
  const type = String(header ?? '').split(';')[0]?.trim().toLowerCase();
  return type && Object.hasOwn(CONTENT_TYPE, type) ? (type as MediaType) : undefined;
}

/** What a rewrite gives, or undefined (logged) when it found the answer unusable. */
function rewritten(step: () => string, req: Request): string | undefined {
  try {
    return step();
  } catch (error) {
    req.log.warn({ err: String(error) }, 'the engine answered something the proxy cannot rewrite for this route');
    return undefined;
  }
}

type Ended = 'completed' | 'client-left' | 'engine-failed' | 'unusable';

/**
 * Copies the answer to the client as it arrives (through the rewrite, if any), pausing the engine
 * while the client is slow. With `holdEnd`, what would complete the answer is held back and
 * returned for the caller to send: the last chunk of a JSON answer (each goes out when the next
 * arrives), the chunk of an event stream with its `[DONE]` (the events before it go out at once).
 */
function pump(
  upstream: Readable,
  res: Response,
  answer: AnswerWatch,
  swap: ModelNameSwap | undefined,
  rewrite: AnswerRewrite | undefined,
  streaming: boolean,
  holdEnd: boolean,
  clock: { onChunk: () => void; onPause: () => void },
): Promise<{ ended: Ended; held: Buffer | string | undefined }> {
  return new Promise((resolve) => {
    let settled = false;
    let held: Buffer | string | undefined;
    const settle = (how: Ended) => {
      if (settled) return;
      settled = true;
      upstream.off('data', onData);
      resolve({ ended: how, held });
    };
    const send = (out: Buffer | string) => {
      if (!res.write(out)) {
        upstream.pause();
        clock.onPause();
        res.once('drain', resume);
      }
    };
    const resume = () => {
      clock.onChunk();
      upstream.resume();
    };
    const onData = (chunk: Buffer) => {
      clock.onChunk();
      answer.observe(chunk);
      const relayed = swap ? swap.push(chunk) : chunk;
      if (relayed.length === 0) return;
      let out: Buffer | string = relayed;
      if (rewrite) {
        try {
          out = rewrite.push(relayed);
        } catch {
          upstream.destroy();
          settle('unusable');
          return;
        }
        if (out === '') return;
      }
      if (!holdEnd) return send(out);
      if (streaming) {
        if (held === undefined && !out.includes(DONE)) return send(out);
        held = held === undefined ? out : Buffer.concat([Buffer.from(held), Buffer.from(out)]);
        return;
      }
      const previous = held;
      held = out;
      if (previous !== undefined) send(previous);
    };
    upstream.on('data', onData);
    upstream.once('end', () => settle('completed'));
    upstream.once('error', () => settle('engine-failed'));
    upstream.once('close', () => settle(upstream.readableEnded ? 'completed' : 'engine-failed'));
    res.once('close', () => settle(res.writableFinished ? 'completed' : 'client-left'));
  });
}

async function readSome(stream: Readable, limit: number): Promise<string> {
  let text = '';
  try {
    for await (const chunk of stream) {
      text += String(chunk);
      if (text.length >= limit) break;
    }
  } catch {
    // What arrived before the failure is enough for the log.
  }
  return text.slice(0, limit);
}
