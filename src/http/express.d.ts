import type { Logger } from 'pino';
import type { Principal, SessionPrincipal } from '../principal.ts';
import type { Operation } from 'openapi-backend';
import type { ErrorFormat, OperationRules, RouteMatch } from './operations.ts';

declare global {
  namespace Express {
    interface Request {
      /** The request id, echoed as `X-Request-Id`. */
      id: string;
      /** A logger bound to this request. */
      log: Logger;
      /** The operation the request matched, with its rules (set by the binding's route middleware, before the body is read). */
      operation?: OperationRules;
      /** What the gateway's router matched to the request's method and path, when it handed the request to the management API (which reuses it). */
      routeMatch?: RouteMatch<Operation>;
      /** The shape of this request's errors: its operation's, or on a 405 its path's; `problem` otherwise. */
      errorFormat?: ErrorFormat;
      /** The unparsed JSON body, kept for the signature check of an `x-csrf-exempt` operation (webhooks). */
      rawBody?: Buffer;
      /** The caller of an inference operation, authenticated by the gateway before the body was read. */
      principal?: Principal;
      /**
       * This request's one validation of its session cookie, shared by the security handlers that
       * ask for it (security.ts). A property of the request, not a WeakMap keyed by it: a young
       * key's entry in a long-lived WeakMap survived the young generation's collections and took
       * the request's objects into the old generation with it (~0.5 MB per scavenge at one
       * request at a time; `--trace-gc-nvp`'s `promoted`).
       */
      sessionValidation?: Promise<SessionPrincipal | undefined>;
    }
  }
}

export {};
