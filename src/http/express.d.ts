import type { Logger } from 'pino';

declare global {
  namespace Express {
    interface Request {
      /** The request id, echoed as `X-Request-Id`. */
      id: string;
      /** A logger bound to this request. */
      log: Logger;
      /** The unparsed JSON body, kept for signature checks (webhooks). */
      rawBody?: Buffer;
    }
  }
}

export {};
