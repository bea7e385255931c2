import type { Logger } from 'pino';
import type { Principal } from '../accounts/principal.ts';

declare global {
  namespace Express {
    interface Request {
      /** The request id, echoed as `X-Request-Id`. */
      id: string;
      /** A logger bound to this request. */
      log: Logger;
      /** The unparsed JSON body, kept for signature checks (webhooks). */
      rawBody?: Buffer;
      /** The caller of an API-key route, authenticated before the body was read (request-body.ts). */
      principal?: Principal;
    }
  }
}

export {};
