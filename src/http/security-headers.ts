import helmet from 'helmet';

const YEAR_SECONDS = 365 * 24 * 60 * 60;

/**
 * The hardening headers of every response (helmet). API answers are data, never pages: their
 * Content-Security-Policy allows nothing and no framing (the documentation pages send their own,
 * see platform/docs.ts). HSTS only in production, where the service is reached over HTTPS; a
 * development server on http://localhost must not pin the browser to HTTPS.
 */
export function securityHeaders(options: { hsts: boolean }) {
  return helmet({
    contentSecurityPolicy: {
      useDefaults: false,
      directives: { defaultSrc: ["'none'"], baseUri: ["'none'"], formAction: ["'none'"], frameAncestors: ["'none'"] },
    },
    strictTransportSecurity: options.hsts ? { maxAge: YEAR_SECONDS, includeSubDomains: true } : false,
    xFrameOptions: { action: 'deny' },
    referrerPolicy: { policy: 'no-referrer' },
  });
}
