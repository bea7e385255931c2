import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Request, Response } from 'express';
import helmet from 'helmet';

const YEAR_SECONDS = 365 * 24 * 60 * 60;

/**
 * The hardening headers of every response (helmet). API answers are data, never pages: their
 * Content-Security-Policy allows nothing and no framing (the documentation pages send their own,
 * see platform/docs.ts). HSTS only in production, where the service is reached over HTTPS; a
 * development server on http://localhost must not pin the browser to HTTPS.
 *
 * Helmet decides the headers; with these options they are the same on every answer (no nonce, no
 * per-request directive), so its chain of a dozen middlewares runs once, here, and each answer gets
 * the list it set (helmet's chain was 1.5 % of the proxy's CPU at 64 connections).
 */
export function securityHeaders(options: { hsts: boolean }): (req: Request, res: Response) => void {
  const headers = headersSetBy(
    helmet({
      contentSecurityPolicy: {
        useDefaults: false,
        directives: { defaultSrc: ["'none'"], baseUri: ["'none'"], formAction: ["'none'"], frameAncestors: ["'none'"] },
      },
      strictTransportSecurity: options.hsts ? { maxAge: YEAR_SECONDS, includeSubDomains: true } : false,
      xFrameOptions: { action: 'deny' },
      referrerPolicy: { policy: 'no-referrer' },
    }),
  );
  return function setSecurityHeaders(_req: Request, res: Response) {
    for (const [name, value] of headers) res.setHeader(name, value);
  };
}

/** The headers a middleware that only sets headers sets, in its order (it must finish synchronously). */
function headersSetBy(middleware: (req: IncomingMessage, res: ServerResponse, next: (error?: unknown) => void) => void): Array<[string, string]> {
  const headers: Array<[string, string]> = [];
  let finished = false;
  const res = {
    setHeader: (name: string, value: string | number | readonly string[]) => headers.push([name, String(value)]),
    removeHeader: () => undefined,
  };
  middleware({ headers: {} } as IncomingMessage, res as unknown as ServerResponse, (error) => {
    if (error) throw error;
    finished = true;
  });
  if (!finished) throw new Error('the security headers middleware did not finish synchronously');
  return headers;
}
