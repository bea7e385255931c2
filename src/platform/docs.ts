import { createRequire } from 'node:module';
import path from 'node:path';
import express, { type Router } from 'express';

const require = createRequire(import.meta.url);

/** Installed asset folders; the docs pages load nothing from the internet. */
const SWAGGER_UI_DIR = path.dirname(require.resolve('swagger-ui-dist/package.json'));
const REDOC_DIR = path.join(path.dirname(require.resolve('redoc/package.json')), 'bundles');

export const DOCS_ASSETS = '/docs/assets';
export const REDOC_ASSETS = '/redoc/assets';

/** Static assets of the two documentation pages, served from installed packages. */
export function docsAssets(): Router {
  const router = express.Router();
  const options = { immutable: true, maxAge: '1d', index: false } as const;
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
  <script>
    window.ui = SwaggerUIBundle({ url: '/openapi.json', dom_id: '#swagger-ui', deepLinking: true, withCredentials: true });
  </script>`,
  );
}

export function redocPage(title: string): string {
  return page(
    `${title} · API reference`,
    '',
    `  <redoc spec-url="/openapi.json"></redoc>
  <script src="${REDOC_ASSETS}/redoc.standalone.js"></script>`,
  );
}
