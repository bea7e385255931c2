import type { IncomingMessage, ServerResponse } from 'node:http';

/**
 * What the simulator's routes share: Xinference's error shape (FastAPI's `HTTPException`, answered
 * as `{"detail": "..."}`), and reading bodies the way its handlers do.
 */

/** An error Xinference would answer with this HTTP status, `{"detail": message}` and these headers. */
export class SimulatorError extends Error {
  readonly status: number;
  readonly headers: Record<string, string>;

  constructor(status: number, message: string, headers: Record<string, string> = {}) {
    super(message);
    this.status = status;
    this.headers = headers;
  }
}

/** A Python `ValueError` raised in a management call: Xinference answers 400. */
export const valueError = (message: string) => new SimulatorError(400, message);
/** A Python `RuntimeError` from the supervisor or a worker. */
export const runtimeError = (message: string) => new SimulatorError(503, message);
/** `ModelNotReadyError`: 503 with `Retry-After: 30` (`xinference/api/utils.py`, `require_model`). */
export const notReady = (message: string) => new SimulatorError(503, `Model is loading, please retry later: ${message}`, { 'retry-after': '30' });

const JSON_TYPE = 'application/json';

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const data = JSON.stringify(body);
  res.writeHead(status, { ...headers, 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(data) });
  res.end(data);
}

export function sendText(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** FastAPI answers a pydantic model that fails to parse inside a handler as an unhandled exception. */
export function pydanticError(res: ServerResponse, schema: string, field: string, problem = 'Field required [type=missing]'): void {
  sendText(res, 500, `Internal Server Error: 1 validation error for ${schema}\n${field}\n  ${problem}`);
}

/** Python's repr of a list of strings or numbers, as Xinference puts it in its messages. */
export function pyList(items: readonly unknown[]): string {
  return `[${items.map((item) => (typeof item === 'string' ? `'${item}'` : String(item))).join(', ')}]`;
}

/** Python's repr of a set of strings (`{'a', 'b'}`), in sorted order where Python's is arbitrary. */
export function pySet(items: readonly string[]): string {
  return `{${items.map((item) => `'${item}'`).join(', ')}}`;
}

export function parseBool(value: string): boolean | undefined {
  const v = value.toLowerCase();
  if (['true', '1', 'on', 'yes', 't', 'y'].includes(v)) return true;
  if (['false', '0', 'off', 'no', 'f', 'n'].includes(v)) return false;
  return undefined;
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
}

/** The JSON object of the body; answers (and returns undefined) when it is not one. */
export async function readJsonObject(req: IncomingMessage, res: ServerResponse, emptyIsObject = false): Promise<Record<string, unknown> | undefined> {
  const raw = await readBody(req);
  if (raw.length === 0 && emptyIsObject) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8'));
  } catch {
    parsed = undefined;
  }
  if (isRecord(parsed)) return parsed;
  sendText(res, 500, 'Internal Server Error: Expecting a JSON object in the request body');
  return undefined;
}

/** The host part of a worker address (`host:port`, `[v6]:port`), as Xinference's `_get_worker_host`. */
export function workerHost(address: string): string {
  if (address.startsWith('[')) {
    const end = address.indexOf(']');
    if (end !== -1) return address.slice(1, end);
  }
  const colon = address.lastIndexOf(':');
  return colon !== -1 && /^\d+$/.test(address.slice(colon + 1)) ? address.slice(0, colon) : address;
}
