import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import express, { type Router } from 'express';
import type { Document } from 'openapi-backend';

const require = createRequire(import.meta.url);

/** Installed asset folders; the docs pages load nothing from the internet. */
const SWAGGER_UI_DIR = path.dirname(require.resolve('swagger-ui-dist/package.json'));
const REDOC_DIR = path.join(path.dirname(require.resolve('redoc/package.json')), 'bundles');

export const DOCS_ASSETS = '/docs/assets';
export const REDOC_ASSETS = '/redoc/assets';
/** Swagger UI's start-up, a served file rather than an inline script, so the page's CSP needs no 'unsafe-inline'. */
const SWAGGER_UI_INIT = `${DOCS_ASSETS}/init.js`;
const SWAGGER_UI_INIT_SCRIPT = `window.ui = SwaggerUIBundle({
  url: '/openapi.json',
  dom_id: '#swagger-ui',
  deepLinking: true,
  withCredentials: true,
  validatorUrl: null,
});
`;

/**
 * The document as the service serves it (`GET /openapi.json`, read by both pages): its one server
 * is `/`, the origin the document is read from, so Swagger UI's "Try it out" calls the service that
 * served the page (the only origin the page's CSP lets it reach), at whatever address it runs. The
 * published file (generated/openapi.json) keeps its `{baseUrl}` server for generated clients.
 */
export function servedDocument(document: Document): Document {
  return { ...document, servers: [{ url: '/', description: 'This service: the origin this document was read from.' }] };
}

/**
 * The Content-Security-Policy of each page: scripts only from this origin (no inline script, no
 * eval), requests only to this origin, never framed. ReDoc renders with styled-components, which
 * inserts <style> elements (so 'unsafe-inline' styles; no inline script), and runs its search
 * index in a worker it creates from a blob: URL.
 */
const COMMON_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "font-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
];
export const SWAGGER_UI_CSP = [...COMMON_POLICY, "style-src 'self'"].join('; ');
export const REDOC_CSP = [...COMMON_POLICY, "style-src 'self' 'unsafe-inline'", 'worker-src blob:'].join('; ');

/**
 * ReDoc's menu always shows a logo it loads from its CDN (no option turns it off). The bundle is
 * served with that address emptied, so the page makes no request to the internet (the image then
 * hides itself) and its CSP needs no external host.
 */
const REDOC_BUNDLE = `${REDOC_ASSETS}/redoc.standalone.js`;
const REDOC_CDN_LOGO = '"https://cdn.redoc.ly/redoc/logo-mini.svg"';

/** Static assets of the two documentation pages, served from installed packages. */
export function docsAssets(): Router {
  const router = express.Router();
  const options = { immutable: true, maxAge: '1d', index: false } as const;
  const script = (body: string) => (_req: express.Request, res: express.Response) => {
    res.type('text/javascript').set('Cache-Control', 'public, max-age=86400, immutable').send(body);
  };
  router.get(SWAGGER_UI_INIT, script(SWAGGER_UI_INIT_SCRIPT));
  router.get(REDOC_BUNDLE, script(readFileSync(path.join(REDOC_DIR, 'redoc.standalone.js'), 'utf8').replaceAll(REDOC_CDN_LOGO, '""')));
  router.use(DOCS_ASSETS, express.static(SWAGGER_UI_DIR, options));
  router.use(REDOC_ASSETS, express.static(REDOC_DIR, options));
  return router;
}

function page(title: string, head: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>${title}</title>${head}
</head>
<body>
${body}
</body>
</html>
`;
}

export function swaggerUiPage(title: string): string {
  return page(
    `${title} · API documentation`,
    `\n  <link rel="stylesheet" href="${DOCS_ASSETS}/swagger-ui.css">`,
    `  <div id="swagger-ui"></div>
  <script src="${DOCS_ASSETS}/swagger-ui-bundle.js"></script>
  <script src="${SWAGGER_UI_INIT}"></script>`,
  );
}

export function redocPage(title: string): string {
  return page(
    `${title} · API reference`,
    '',
    `  <redoc spec-url="/openapi.json"></redoc>
  <script src="${REDOC_BUNDLE}"></script>`,
  );
}
