import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import express, { type ErrorRequestHandler, type RequestHandler } from 'express';
import { describe, expect, it } from 'vitest';
import { answerWithPipeline } from '../../src/http/pipeline.ts';

/** An app answering through `steps` on a loopback port; the error handler answers 599 with the error's message. */
async function serve(steps: RequestHandler[], onError?: ErrorRequestHandler) {
  const app = express();
  answerWithPipeline(app, steps, onError ?? ((error: Error, _req, res) => res.status(599).send(`failed: ${error.message}`)));
  const server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    get: (path = '/') => fetch(`${url}${path}`),
    [Symbol.asyncDispose]: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const pass: RequestHandler = (_req, _res, next) => next();

describe('answerWithPipeline', () => {
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
