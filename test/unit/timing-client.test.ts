import { createServer, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { TimingClient } from '../../bench/timing-client.ts';

/**
 * The data-scale benchmark's timing client (bench/timing-client.ts) against a raw TCP peer that
 * writes each answer in the pieces a test chooses, so every framing case is met on purpose.
 */
let server: Server | undefined;
afterEach(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));

/** A peer answering each request (one per `\r\n\r\n`) with the next answer's pieces, written apart. */
async function peer(answers: string[][]): Promise<{ base: string; requests: string[] }> {
  const requests: string[] = [];
  server = createServer((socket) => {
    let pending = '';
    socket.on('data', async (data) => {
      pending += data.toString('latin1');
      while (pending.includes('\r\n\r\n')) {
        const end = pending.indexOf('\r\n\r\n') + 4;
        requests.push(pending.slice(0, end));
        pending = pending.slice(end);
        for (const piece of answers.shift() ?? []) {
          await new Promise<void>((resolve) => socket.write(piece, () => resolve()));
          await new Promise((resolve) => setImmediate(resolve));
        }
      }
    });
  });
  await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('no address');
  return { base: `http://127.0.0.1:${address.port}`, requests };
}

const answer = (status: string, body: string, headers: string[] = []) => [`HTTP/1.1 ${status}`, `content-length: ${Buffer.byteLength(body)}`, ...headers, '', body].join('\r\n');

describe('the timing client', () => {
  it('reads answers over one connection, however they are split, and keeps a body only when asked or not 200', async () => {
    const big = 'x'.repeat(300_000);
    const first = answer('200 OK', '{"items":[1,2]}');
    const second = answer('200 OK', big);
    const third = answer('404 Not Found', '{"code":"NOT_FOUND"}');
    const { base, requests } = await peer([
      [first],
      // The head split inside its end, the body over several reads.
      [second.slice(0, 30), second.slice(30, second.indexOf('\r\n\r\n') + 2), second.slice(second.indexOf('\r\n\r\n') + 2, 70_000), second.slice(70_000)],
      [third],
      [first.slice(0, 5), first.slice(5)],
    ]);
    const client = new TimingClient(base);
    try {
      expect(await client.get('/a', { accept: 'application/json' }, { keepBody: true })).toMatchObject({ status: 200, body: '{"items":[1,2]}' });
      const unkept = await client.get('/b?x=1', {});
      expect(unkept).toMatchObject({ status: 200, body: '' });
      expect(unkept.ms).toBeGreaterThan(0);
      expect(await client.get('/c', {})).toMatchObject({ status: 404, body: '{"code":"NOT_FOUND"}' });
      expect(await client.get('/d', {}, { keepBody: true })).toMatchObject({ status: 200, body: '{"items":[1,2]}' });
    } finally {
      client.close();
    }
    expect(requests.map((request) => request.split('\r\n')[0])).toEqual(['GET /a HTTP/1.1', 'GET /b?x=1 HTTP/1.1', 'GET /c HTTP/1.1', 'GET /d HTTP/1.1']);
    expect(requests[0]).toContain('accept: application/json\r\n');
  });

  it('refuses an answer framed otherwise than by Content-Length, and one longer than it says', async () => {
    const { base } = await peer([
      [['HTTP/1.1 200 OK', 'transfer-encoding: chunked', '', '2', '{}', '0', '', ''].join('\r\n')],
      [answer('200 OK', '{}') + 'extra'],
    ]);
    const client = new TimingClient(base);
    try {
      await expect(client.get('/chunked', {})).rejects.toThrow(/without Content-Length/);
      await expect(client.get('/long', {})).rejects.toThrow(/more bytes than/);
    } finally {
      client.close();
    }
  });

  it('fails the call under way when the connection is lost, and opens a new one for the next', async () => {
    let connections = 0;
    server = createServer((socket) => {
      connections++;
      socket.once('data', () => (connections === 1 ? socket.destroy() : socket.end(answer('200 OK', '{}'))));
    });
    await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    if (!address || typeof address === 'string') throw new Error('no address');
    const client = new TimingClient(`http://127.0.0.1:${address.port}`);
    try {
      await expect(client.get('/', {})).rejects.toThrow(/closed the connection/);
      expect(await client.get('/', {}, { keepBody: true })).toMatchObject({ status: 200, body: '{}' });
      expect(connections).toBe(2);
    } finally {
      client.close();
    }
  });
});
