import type { AddressInfo } from 'node:net';
import express, { type Request, type Response } from 'express';
import { describe, expect, it } from 'vitest';
import { closeServer, listen, messageClassesOf } from '../../src/http/server.ts';

describe('listen', () => {
  it('makes each request and response with the app\'s prototypes, so both planes get Express\'s methods without changing one per request', async () => {
    const app = express();
    app.set('trust proxy', false);
    const classes = messageClassesOf(app);
    const made: boolean[] = [];
    const server = await listen(
      {
        app,
        listener: (req, res) => {
          made.push(Object.getPrototypeOf(req) === classes.IncomingMessage.prototype, Object.getPrototypeOf(res) === classes.ServerResponse.prototype);
          const [request, response] = [req as Request, res as Response];
          // Linked as Express's `init` and the gateway link them.
          request.res = response;
          response.req = request;
          response.status(200).json({ ip: request.ip, header: request.get('x-mark') ?? null, path: request.path });
        },
      },
      0,
      '127.0.0.1',
    );
    try {
      const response = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/a/b?c=1`, { headers: { 'x-mark': 'm' } });
      expect(await response.json()).toEqual({ ip: '127.0.0.1', header: 'm', path: '/a/b' });
      expect(made).toEqual([true, true]);
    } finally {
      await closeServer(server, 1_000);
    }
  });
});
