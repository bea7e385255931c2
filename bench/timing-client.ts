import net from 'node:net';
import { performance } from 'node:perf_hooks';

/** One answer: from the request's first byte sent to the answer's last byte read. */
export interface TimedAnswer {
  ms: number;
  status: number;
  /** The body, when it was asked for or the status is not 200; otherwise empty. */
  body: string;
}

interface Reading {
  resolve: (answer: TimedAnswer) => void;
  reject: (error: Error) => void;
  t0: number;
  keepBody: boolean;
  head: Buffer[];
  status: number;
  /** Body bytes still to come; -1 while the head is being read. */
  remaining: number;
  body: Buffer[];
  keep: boolean;
  received: boolean;
}

const HEAD_END = Buffer.from('\r\n\r\n');
/** An answer's head (status line and headers) is at most this long. */
const HEAD_MAX = 16_384;

/**
 * A keep-alive HTTP/1.1 client of one connection for timed GETs, which allocates nothing per
 * answer it does not keep: the socket reads into one buffer (`onread`), and the body is counted, not
 * copied. With `node:http`, every answer's chunks are new buffers: a kept list's answer (up to a
 * megabyte) at a time made the measuring process collect its whole heap every 30 to 50 calls, on
 * external memory alone, and those 5 to 12 ms pauses landed inside the calls being timed
 * (`node --trace-gc bench/db-scale.ts`: the heavy lists' slow calls were the client's collections,
 * not the service's). Answers must carry a `Content-Length` (the service's JSON answers do); any
 * other framing is an error, never a guess.
 */
export class TimingClient {
  readonly #host: string;
  readonly #port: number;
  readonly #buffer = Buffer.allocUnsafe(1 << 20);
  #socket: net.Socket | undefined;
  #reading: Reading | undefined;

  constructor(base: string) {
    const url = new URL(base);
    this.#host = url.hostname;
    this.#port = Number(url.port || 80);
  }

  async get(pathAndQuery: string, headers: Record<string, string>, options: { keepBody?: boolean } = {}): Promise<TimedAnswer> {
    const socket = await this.#connected();
    const request = [`GET ${pathAndQuery} HTTP/1.1`, `host: ${this.#host}:${this.#port}`, ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`), '', ''].join('\r\n');
    return new Promise((resolve, reject) => {
      this.#reading = { resolve, reject, t0: performance.now(), keepBody: options.keepBody ?? false, head: [], status: 0, remaining: -1, body: [], keep: false, received: false };
      socket.write(request);
    });
  }

  close(): void {
    this.#socket?.destroy();
    this.#socket = undefined;
  }

  /** The open connection, or a new one (connecting is never part of a timed call). */
  async #connected(): Promise<net.Socket> {
    if (this.#socket && !this.#socket.destroyed) return this.#socket;
    const socket = net.connect({
      host: this.#host,
      port: this.#port,
      noDelay: true,
      onread: {
        buffer: this.#buffer,
        callback: (bytes: number, buffer: Uint8Array) => {
          this.#read(buffer as Buffer, bytes);
          return true;
        },
      },
    });
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    const lost = (error: Error) => {
      if (this.#socket === socket) this.#fail(error);
    };
    socket.on('error', lost);
    socket.on('close', () => lost(new Error('the service closed the connection before the answer ended')));
    socket.setTimeout(120_000, () => lost(new Error('no answer in 120 s')));
    this.#socket = socket;
    return socket;
  }

  #read(buffer: Buffer, bytes: number): void {
    const reading = this.#reading;
    if (!reading) {
      this.#fail(new Error(`${bytes} bytes arrived with no request under way`));
      return;
    }
    reading.received = true;
    let at = 0;
    if (reading.remaining < 0) {
      // The head is small: only it is copied (at most HEAD_MAX bytes of a read), until its end is in.
      reading.head.push(Buffer.from(buffer.subarray(0, Math.min(bytes, HEAD_MAX))));
      const head = Buffer.concat(reading.head);
      const end = head.indexOf(HEAD_END);
      if (end < 0) {
        if (head.length >= HEAD_MAX || bytes > HEAD_MAX) this.#fail(new Error(`an answer's head longer than ${HEAD_MAX} bytes`));
        return;
      }
      const lines = head.subarray(0, end).toString('latin1').split('\r\n');
      reading.status = Number(lines[0]?.split(' ')[1]);
      const length = lines.find((line) => /^content-length:/i.test(line));
      if (!length || lines.some((line) => /^transfer-encoding:/i.test(line))) {
        this.#fail(new Error(`an answer without Content-Length (status ${reading.status}): the timing client reads no other framing`));
        return;
      }
      reading.remaining = Number(length.slice(length.indexOf(':') + 1).trim());
      reading.keep = reading.keepBody || reading.status !== 200;
      // What of this read follows the head is body.
      at = end + HEAD_END.length - (head.length - Math.min(bytes, HEAD_MAX));
    }
    const body = bytes - at;
    if (reading.keep && body > 0) reading.body.push(Buffer.from(buffer.subarray(at, bytes)));
    reading.remaining -= body;
    if (reading.remaining > 0) return;
    if (reading.remaining < 0) {
      this.#fail(new Error('more bytes than the answer\'s Content-Length'));
      return;
    }
    this.#reading = undefined;
    reading.resolve({ ms: performance.now() - reading.t0, status: reading.status, body: reading.keep ? Buffer.concat(reading.body).toString('utf8') : '' });
  }

  /** Ends the connection, and the call under way with `error` (a connection lost between calls is only reopened by the next). */
  #fail(error: Error): void {
    const reading = this.#reading;
    const socket = this.#socket;
    this.#reading = undefined;
    this.#socket = undefined;
    socket?.destroy();
    reading?.reject(error);
  }
}
