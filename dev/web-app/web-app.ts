import { readFileSync } from 'node:fs';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { setRoute } from '../../src/http/request-log.ts';

/**
 * Local stand-in for the web app: the pages where the links of the service's emails and the Stripe
 * emulator's Checkout land (`WEB_APP_URL/…`, which defaults to the service itself), served by the
 * API process under `make run` only (Config.localWebApp: NODE_ENV=development and no WEB_APP_URL;
 * never in production). Each page is plain HTML plus one script file of this origin
 * (`assets/landing.js`) that completes the action through the public API, as a web app would:
 *
 * - `/verify-email?token=…`: confirms the address (`confirmEmailVerification`, no session needed);
 * - `/reset-password?token=…`: a new-password form (`confirmPasswordReset`);
 * - `/invitations/{token}`: the invitation (`previewInvitation`), accepted by a signed-in user
 *   (`acceptInvitationByToken`), with a sign-in form (`signIn`) and a create-account form
 *   (`registerWithInvitation`) otherwise;
 * - `/settings/billing`: where Checkout returns (success and cancel alike) and spending alerts
 *   link: the saved card or its absence and the billing account (`listPaymentMethods`,
 *   `getBillingAccount`), after a sign-in form when needed.
 *
 * These paths are no operations of the API: with the stand-in off they answer 404 as any unknown
 * path does.
 */

export const LOCAL_WEB_APP_ASSETS = '/local-web-app';

/**
 * The pages' Content-Security-Policy: scripts and styles only from this origin (no inline script or
 * style, no eval), requests only to this origin, no form posted anywhere (the script sends them),
 * never framed.
 */
export const LOCAL_WEB_APP_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

interface Landing {
  /** The route template the access line names (never the URL: the tokens stay out of the logs). */
  route: string;
  page: string;
  title: string;
}

function landingOf(path: string): Landing | undefined {
  if (path === '/verify-email') return { route: 'GET /verify-email (local web app)', page: 'verify-email', title: 'Confirm your email address' };
  if (path === '/reset-password') return { route: 'GET /reset-password (local web app)', page: 'reset-password', title: 'Choose a new password' };
  if (/^\/invitations\/[^/]+$/.test(path)) return { route: 'GET /invitations/{token} (local web app)', page: 'invitation', title: 'Invitation' };
  if (path === '/settings/billing') return { route: 'GET /settings/billing (local web app)', page: 'billing', title: 'Billing' };
  return undefined;
}

function page(landing: Landing): string {
  return `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>${landing.title} · local stand-in for the web app</title>
  <link rel="stylesheet" href="${LOCAL_WEB_APP_ASSETS}/landing.css">
  <script type="module" src="${LOCAL_WEB_APP_ASSETS}/landing.js"></script>
</head>
<body data-page="${landing.page}">
  <p class="stand-in">Local stand-in for the web app: a minimal page that <code>make run</code> serves where the links of emails and of Checkout land. A real web app (<code>WEB_APP_URL</code>) replaces it; production never serves it.</p>
  <h1>${landing.title}</h1>
  <main id="app"><p>Loading…</p></main>
  <noscript><p>This page needs JavaScript.</p></noscript>
</body>
</html>
`;
}

/**
 * The step of the app's pipeline that answers the landing pages and their two files; any other
 * request (and any method but GET and HEAD) passes on to the API's routes.
 */
export function localWebApp(): RequestHandler {
  const assetsDir = new URL('./assets/', import.meta.url);
  const assets = new Map([
    [`${LOCAL_WEB_APP_ASSETS}/landing.js`, { type: 'text/javascript; charset=utf-8', body: readFileSync(new URL('landing.js', assetsDir), 'utf8') }],
    [`${LOCAL_WEB_APP_ASSETS}/landing.css`, { type: 'text/css; charset=utf-8', body: readFileSync(new URL('landing.css', assetsDir), 'utf8') }],
  ]);
  return function localWebAppPages(req: Request, res: Response, next: NextFunction) {
    if (req.method !== 'GET' && req.method !== 'HEAD') return next();
    const asset = assets.get(req.path);
    if (asset) {
      setRoute(res, `GET ${req.path} (local web app)`);
      res.status(200).set({ 'Content-Type': asset.type, 'Cache-Control': 'no-cache' }).send(asset.body);
      return;
    }
    const landing = landingOf(req.path);
    if (!landing) return next();
    setRoute(res, landing.route);
    res
      .status(200)
      .set({ 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-store', 'Content-Security-Policy': LOCAL_WEB_APP_CSP })
      .send(page(landing));
  };
}
