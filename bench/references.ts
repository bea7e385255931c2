/**
 * The reference pass-throughs `make bench` measures beside the proxy, each its own process in
 * front of the same engine, forwarding `POST /v1/chat/completions` with the client's body and
 * Authorization, and relaying the answer as it arrives (server-sent events included):
 *
 *  - `raw`: node:http server and a node:http client on a keep-alive agent, `.pipe()` both ways,
 *    the upstream Content-Length forwarded: the floor of a Node proxy on this machine;
 *  - `raw-undici`: the same server, with undici's `Pool.request` as the client (measured once to
 *    choose the relay's client; not among the default targets);
 *  - `express-got`: Express 5, `express.json()`, `got.stream` with the body re-serialised,
 *    `stream/promises` `pipeline` to the client: the usual way to write it, and the relay before
 *    it moved to node:http.
 *
 * Usage: node bench/references.ts raw|raw-undici|express-got --upstream http://127.0.0.1:PORT
 * Prints the URL it listens on (an ephemeral loopback port) on its first line.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import express from 'express';
import got from 'got';
import { Pool } from 'undici';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

const [kind, flag, upstreamArg] = process.argv.slice(2);
if (flag !== '--upstream' || !upstreamArg || !['raw', 'raw-undici', 'express-got'].includes(kind ?? '')) {
  process.stderr.write('usage: node bench/references.ts raw|raw-undici|express-got --upstream http://host:port\n');
  process.exit(2);
}
const upstream = new URL(upstreamArg);

/** Headers of the answer the references pass on: its type, and its length when it has one. */
function answerHeaders(headers: IncomingMessage['headers'] | Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = { 'content-type': String(headers['content-type'] ?? 'application/octet-stream') };
  if (headers['content-length'] !== undefined) out['content-length'] = String(headers['content-length']);
  return out;
}

function requestHeaders(req: IncomingMessage): Record<string, string> {
  const out: Record<string, string> = { 'content-type': req.headers['content-type'] ?? 'application/json', accept: req.headers.accept ?? '*/*' };
  if (req.headers.authorization) out.authorization = req.headers.authorization;
  if (req.headers['content-length']) out['content-length'] = req.headers['content-length'];
  return out;
}

function failed(res: ServerResponse): void {
  if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' });
  res.end();
}

function raw(): Handler {
  const agent = new http.Agent({ keepAlive: true, timeout: 4_000, scheduling: 'lifo' });
  return (req, res) => {
    const out = http.request({ hostname: upstream.hostname, port: upstream.port, path: req.url, method: 'POST', headers: requestHeaders(req), agent }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answerHeaders(answer.headers));
      answer.pipe(res);
    });
    out.on('error', () => failed(res));
    res.on('close', () => {
      if (!res.writableFinished) out.destroy();
    });
    req.pipe(out);
  };
}

function rawUndici(): Handler {
  const pool = new Pool(upstream.origin, { connections: 256, pipelining: 1 });
  return (req, res) => {
    const abort = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) abort.abort();
    });
    pool
      .request({ path: req.url ?? '/', method: 'POST', headers: requestHeaders(req), body: req, signal: abort.signal })
      .then((answer) => {
        res.writeHead(answer.statusCode, answerHeaders(answer.headers));
        answer.body.pipe(res);
        answer.body.on('error', () => res.destroy());
      })
      .catch(() => failed(res));
  };
}

function expressGot(): Handler {
  const client = got.extend({ retry: { limit: 0 }, throwHttpErrors: false, decompress: false, followRedirect: false });
  const app = express();
  app.use(express.json({ limit: '10mb' }));
  app.post('/v1/chat/completions', async (req, res) => {
    const out = client.stream.post(new URL(req.path, upstream), {
      json: req.body as Record<string, unknown>,
      headers: { authorization: req.get('authorization') ?? '', accept: req.get('accept') ?? '*/*' },
    });
    out.once('response', (answer: IncomingMessage) => {
      res.status(answer.statusCode ?? 502).set('content-type', answer.headers['content-type']);
    });
    try {
      await pipeline(out, res);
    } catch {
      failed(res);
    }
  });
  return app as unknown as Handler;
}

const handler = kind === 'raw' ? raw() : kind === 'raw-undici' ? rawUndici() : expressGot();
const server = http.createServer(handler);
server.keepAliveTimeout = 65_000;
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('no address');
  process.stdout.write(`http://127.0.0.1:${address.port}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
