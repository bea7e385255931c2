import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser } from '../factories/accounts.ts';
import { deployment, type Deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { EngineStub } from '../helpers/engine-stub.ts';
import { liveBytes } from '../helpers/memory.ts';
import { waitUntil } from '../helpers/net.ts';

/**
 * The engine's faults, survived: an engine that resets the connection before answering,
 * resets it in the middle of a stream, stalls before its first byte, or refuses connections. Each
 * answers the documented error (502 `upstream_error`, 504 `upstream_timeout`, or for a stream already
 * started an error event and the end), within the configured timeouts, and 1,000 such requests leave
 * no socket open on either side and no lasting growth of the heap.
 */
const CHAT = 'POST /v1/chat/completions';
const FIRST_CHUNK = 'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}\n\n';
const UPSTREAM_ERROR = { message: expect.any(String), type: 'server_error', code: 'upstream_error', param: null };

let app: TestApp;
let stub: EngineStub;
let chat: Deployment;
let key: string;

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING, INFERENCE_FIRST_BYTE_TIMEOUT_SECONDS: '1', INFERENCE_IDLE_TIMEOUT_SECONDS: '1' }, { workers: true, cluster: { modelLoadMs: 20 } });
  stub = await EngineStub.inFrontOf(app);
  const owner = await registeredUser(app);
  chat = await deployment(app, owner, 'running');
  key = (await apiKey(owner, [chat.id])).key;
}, 120_000);
afterAll(async () => {
  await app?.close();
  await stub?.stop().catch(() => undefined);
});

/**
 * One chat completion on a connection of its own, closed after the answer (so that what stays open
 * afterwards is what the service failed to close, not a client's pool); what the client got.
 */
function chatOnce(stream: boolean): Promise<{ status: number; body: string }> {
  const payload = JSON.stringify({ model: chat.id, messages: [{ role: 'user', content: 'hi' }], stream });
  return new Promise((resolve, reject) => {
    const req = request(
      `${app.url}/v1/chat/completions`,
      { method: 'POST', agent: false, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/** Sockets of this process (the service runs in it): the proxy's to the engine and the clients'. */
const tcpHandles = () => process.getActiveResourcesInfo().filter((kind) => kind === 'TCPSocketWrap').length;

describe('engine faults', () => {
  it('a reset before the answer: 502 upstream_error', async () => {
    stub.behave(CHAT, (req) => req.socket.destroy());
    const answer = await chatOnce(false);
    expect(answer.status).toBe(502);
    expect(JSON.parse(answer.body)).toEqual({ error: UPSTREAM_ERROR });
  });

  it('a reset in the middle of a stream: the events so far, one error event, then the end', async () => {
    stub.behave(CHAT, (req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(FIRST_CHUNK, () => setImmediate(() => req.socket.destroy()));
    });
    const answer = await chatOnce(true);
    expect(answer.status).toBe(200);
    expect(answer.body.startsWith(FIRST_CHUNK)).toBe(true);
    const tail = /^data: (.*)\n\n$/.exec(answer.body.slice(FIRST_CHUNK.length));
    expect(JSON.parse(tail?.[1] ?? 'null')).toEqual({ error: UPSTREAM_ERROR });
    expect(answer.body).not.toContain('[DONE]');
  });

  it('a stall before the first byte: 504 upstream_timeout after the first-byte timeout', async () => {
    stub.behave(CHAT, (req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.flushHeaders();
    });
    const started = performance.now();
    const answer = await chatOnce(false);
    const waited = performance.now() - started;
    expect(answer.status).toBe(504);
    expect(JSON.parse(answer.body)).toMatchObject({ error: { code: 'upstream_timeout', type: 'server_error' } });
    // After the first-byte timeout (1 s here), not before it, and not long after (the idle timeout is 1 s too).
    expect(waited).toBeGreaterThanOrEqual(1_000);
    expect(waited).toBeLessThan(5_000);
  });

  it('1,000 faulted requests leave no socket open and no lasting heap growth', async () => {
    stub.behave(CHAT, undefined);
    expect((await chatOnce(false)).status).toBe(200);
    const baseline = { handles: tcpHandles() };
    const faults = [
      { kind: 'reset', run: () => stub.behave(CHAT, (req) => req.socket.destroy()), stream: false, expected: 502, n: 450 },
      {
        kind: 'reset mid-stream',
        run: () =>
          stub.behave(CHAT, (req, res) => {
            req.resume();
            res.writeHead(200, { 'content-type': 'text/event-stream' });
            res.write(FIRST_CHUNK, () => setImmediate(() => req.socket.destroy()));
          }),
        stream: true,
        expected: 200,
        n: 450,
      },
      {
        kind: 'stall',
        run: () =>
          stub.behave(CHAT, (req, res) => {
            req.resume();
            res.writeHead(200, { 'content-type': 'application/json' });
            res.flushHeaders();
          }),
        stream: false,
        expected: 504,
        n: 100,
      },
    ];
    /** The 1,000 faulted requests, 50 at a time: the statuses seen per fault. */
    const faultedRound = async () => {
      const statuses = new Map<string, number[]>();
      for (const fault of faults) {
        fault.run();
        const seen: number[] = [];
        for (let done = 0; done < fault.n; done += 50) {
          const batch = await Promise.all(Array.from({ length: Math.min(50, fault.n - done) }, () => chatOnce(fault.stream)));
          seen.push(...batch.map((answer) => answer.status));
        }
        statuses.set(fault.kind, seen);
      }
      return statuses;
    };
    // A first round fills what is bounded (pools, caches, buffers of usage not flushed yet); the second
    // must leave nothing more behind.
    /** What the process holds once a round's sockets closed and its usage records were written. */
    const settled = async () => {
      await waitUntil(async () => stub.openSockets <= 2, () => `the engine's sockets to close (${stub.openSockets} open)`);
      await waitUntil(async () => tcpHandles() <= baseline.handles + 2, () => `this process's sockets to close (${tcpHandles()} open, ${baseline.handles} before)`);
      await app.container.usage.flush();
      return liveBytes();
    };
    await faultedRound();
    stub.behave(CHAT, undefined);
    expect((await chatOnce(false)).status).toBe(200);
    const afterFirstRound = await settled();
    const statuses = await faultedRound();
    stub.behave(CHAT, undefined);
    for (const fault of faults) expect(new Set(statuses.get(fault.kind)), fault.kind).toEqual(new Set([fault.expected]));

    // Every connection of the faulted requests closes (on the engine's side and in this process), and
    // the service still answers.
    const afterSecondRound = await settled();
    expect((await chatOnce(false)).status).toBe(200);
    // No lasting growth: what the second 1,000 requests left held, after a full collection
    // (test/helpers/memory.ts), under 640 bytes a request (320 KB seen on a loaded machine; tried once
    // against a relay that kept an array of 128 references per request: 1,026,216 bytes left, refused).
    expect(afterSecondRound - afterFirstRound).toBeLessThan(640 * 1000);
  }, 120_000);

  it('an engine that refuses connections: 502 upstream_error', async () => {
    await stub.stop();
    const answer = await chatOnce(false);
    expect(answer.status).toBe(502);
    expect(JSON.parse(answer.body)).toEqual({ error: UPSTREAM_ERROR });
  });
});
