import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import express, { type ErrorRequestHandler, type Express, type RequestHandler } from 'express';
import { describe, expect, it } from 'vitest';
import { answerWithPipeline, messageClassesOf } from '../../src/http/pipeline.ts';
import { listen } from '../../src/http/server.ts';

/** An app answering through `steps` on a loopback port; the error handler answers 599 with the error's message. */
async function serve(steps: RequestHandler[], onError?: ErrorRequestHandler, options: { server?: 'express' | 'listen'; app?: Express } = {}) {
  const app = options.app ?? express();
  answerWithPipeline(app, steps, onError ?? ((error: Error, _req, res) => res.status(599).send(`failed: ${error.message}`)));
  const server = options.server === 'listen' ? await listen(app, 0, '127.0.0.1') : app.listen(0, '127.0.0.1');
  if (!server.listening) await once(server, 'listening');
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    get: (path = '/') => fetch(`${url}${path}`),
    [Symbol.asyncDispose]: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const pass: RequestHandler = (_req, _res, next) => next();

describe('answerWithPipeline', () => {
  it('on the server of `listen`, gets requests and responses made with the app\'s prototypes (none changed per request)', async () => {
    const app = express();
    const classes = messageClassesOf(app);
    const made: boolean[] = [];
    await using served = await serve(
      [
        (req, res) => {
          made.push(Object.getPrototypeOf(req) === classes.IncomingMessage.prototype, Object.getPrototypeOf(res) === classes.ServerResponse.prototype);
          res.status(200).json({ ip: req.ip, header: req.get('x-mark') });
        },
      ],
      undefined,
      { server: 'listen', app },
    );
    const response = await served.get('/');
    expect(await response.json()).toEqual({ ip: '127.0.0.1', header: undefined });
    expect(made).toEqual([true, true]);
  });

  it('runs the steps in order with Express requests and responses, until one answers', async () => {
    const seen: string[] = [];
    await using app = await serve([
      (req, _res, next) => {
        seen.push(`first ${req.path} ${String(req.query.q)}`);
        next();
      },
      async (req, res, next) => {
        await Promise.resolve();
        res.locals.mark = req.get('x-mark') ?? 'none';
        next();
      },
      (_req, res) => {
        res.status(201).json({ mark: res.locals.mark });
      },
      () => seen.push('never'),
    ]);
    const response = await app.get('/a/path?q=1');
    expect(response.status).toBe(201);
    expect(await response.json()).toEqual({ mark: 'none' });
    expect(seen).toEqual(['first /a/path 1']);
  });

  it.each<[string, RequestHandler]>([
    ['passes an error to next', (_req, _res, next) => next(new Error('passed'))],
    ['throws', () => {
      throw new Error('thrown');
    }],
    ['rejects', async () => {
      await Promise.resolve();
      throw new Error('rejected');
    }],
  ])('gives the error handler what a step failed with when it %s', async (_how, failing) => {
    await using app = await serve([pass, failing, () => expect.unreachable()]);
    const response = await app.get();
    expect(response.status).toBe(599);
    expect(await response.text()).toMatch(/^failed: (passed|thrown|rejected)$/);
  });

  it('fails a request no step answered', async () => {
    await using app = await serve([pass, pass]);
    const response = await app.get();
    expect(response.status).toBe(599);
    expect(await response.text()).toBe('failed: no step of the pipeline answered');
  });

  it('closes the connection when the error handler fails in turn', async () => {
    await using app = await serve([() => Promise.reject(new Error('first'))], () => {
      throw new Error('the handler failed too');
    });
    await expect(app.get()).rejects.toThrow();
  });
});
