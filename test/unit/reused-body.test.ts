import express from 'express';
import { describe, expect, it } from 'vitest';
import { markReused, reusedJson } from '../../src/http/reused-body.ts';

describe('a reused body', () => {
  it('is written once, as res.json writes it, and the same bytes are answered after', async () => {
    const body = { items: [{ id: 1, name: 'ünïcode “quoted” \u2028', at: '2026-11-26T08:00:00.000Z', none: null }] };
    expect(reusedJson(body)).toBeUndefined();
    markReused(body);
    const first = reusedJson(body);
    expect(first).toBeInstanceOf(Buffer);
    expect(reusedJson(body)).toBe(first);

    // Byte for byte what Express's res.json answers for the same value.
    const app = express();
    app.get('/', (_req, res) => res.json(body));
    const server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    try {
      const { port } = server.address() as { port: number };
      const answered = Buffer.from(await (await fetch(`http://127.0.0.1:${port}/`)).arrayBuffer());
      expect(answered.equals(first as Buffer)).toBe(true);
    } finally {
      server.close();
    }
  });

  it('leaves unmarked bodies and non-objects alone', () => {
    expect(reusedJson([1, 2])).toBeUndefined();
    expect(reusedJson('text')).toBeUndefined();
    expect(reusedJson(undefined)).toBeUndefined();
    expect(reusedJson(null)).toBeUndefined();
  });
});
