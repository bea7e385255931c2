import type { Logger } from 'pino';
import type { Principal } from '../accounts/principal.ts';
import type { ErrorFormat, OperationRules } from './operations.ts';

declare global {
  namespace Express {
    interface Request {
      /** The request id, echoed as `X-Request-Id`. */
      id: string;
      /** A logger bound to this request. */
      log: Logger;
      /** The operation the request matched, with its rules (set by the binding's route middleware, before the body is read). */
      operation?: OperationRules;
      /** The shape of this request's errors: its operation's, or on a 405 its path's; `problem` otherwise. */
      errorFormat?: ErrorFormat;
      /** The unparsed JSON body, kept for the signature check of an `x-csrf-exempt` operation (webhooks). */
      rawBody?: Buffer;
      /** The caller of an API-key route, authenticated before the body was read (request-body.ts). */
      principal?: Principal;
    }
  }
}

export {};
