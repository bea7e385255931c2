import { IncomingMessage, ServerResponse } from 'node:http';
import type { ErrorRequestHandler, Express, NextFunction, Request, RequestHandler, Response } from 'express';

/**
 * Makes `app` answer every request by running `steps` in order, then `onError` with what one of
 * them failed with, without Express's router. Express still makes the request and the response
 * (their prototypes: `req.get`, `req.ip`, `req.query`, `res.set`…, and the app's settings); its
 * router matched each step against the path, kept per-request layer state and made a final
 * handler per request: 3 % of the proxy's CPU at 64 connections, for a pipeline whose steps all
 * run on every request (each decides for itself whether it applies). As under Express 5, a step
 * passes on with `next()` and fails the request with `next(error)`, by throwing, or by a rejected
 * promise.
 */
export function answerWithPipeline(app: Express, steps: readonly RequestHandler[], onError: ErrorRequestHandler): void {
  const { IncomingMessage: AppRequest, ServerResponse: AppResponse } = messageClassesOf(app);
  const handle = (req: Request, res: Response): void => {
    req.res = res;
    res.req = req;
    // Made by the server as the app's own (`listen`), or else given the app's prototypes here.
    if (!(req instanceof AppRequest)) Object.setPrototypeOf(req, app.request);
    if (!(res instanceof AppResponse)) Object.setPrototypeOf(res, app.response);
    res.locals ??= Object.create(null) as Response['locals'];
    let index = 0;
    let failed = false;
    const fail = (error: unknown): void => {
      if (failed) {
        // The error handler failed in turn: nothing sensible can be sent.
        res.destroy();
        return;
      }
      failed = true;
      try {
        onError(error, req, res, fail);
      } catch (again) {
        fail(again);
      }
    };
    const next: NextFunction = (error?: unknown) => {
      if (error) return fail(error);
      const step = steps[index++];
      if (!step) return fail(new Error('no step of the pipeline answered'));
      try {
        const result = step(req, res, next) as unknown;
        if (result instanceof Promise) result.catch((rejection: unknown) => fail(rejection ?? new Error('a step rejected without a reason')));
      } catch (thrown) {
        fail(thrown);
      }
    };
    next();
  };
  // Express's entry point (`app(req, res)` calls it), which its type declarations leave out.
  (app as Express & { handle: typeof handle }).handle = handle;
}

const messageClasses = new WeakMap<Express, { IncomingMessage: typeof IncomingMessage; ServerResponse: typeof ServerResponse }>();

/**
 * The classes of the requests and responses of `app`'s server (`http.createServer`'s
 * `IncomingMessage` and `ServerResponse` options): node:http's own, with Express's methods and
 * settings (`app.request`, `app.response`) on their prototype chain. Express gives each request and
 * response those prototypes after the fact (`Object.setPrototypeOf`, twice per request: 1 % of the
 * proxy's CPU at 64 connections, and objects whose prototype changed are slower to use after).
 */
export function messageClassesOf(app: Express): { IncomingMessage: typeof IncomingMessage; ServerResponse: typeof ServerResponse } {
  const known = messageClasses.get(app);
  if (known) return known;
  class AppRequest extends IncomingMessage {}
  class AppResponse<R extends IncomingMessage = IncomingMessage> extends ServerResponse<R> {}
  Object.setPrototypeOf(AppRequest.prototype, app.request);
  Object.setPrototypeOf(AppResponse.prototype, app.response);
  const classes = { IncomingMessage: AppRequest, ServerResponse: AppResponse };
  messageClasses.set(app, classes);
  return classes;
}
