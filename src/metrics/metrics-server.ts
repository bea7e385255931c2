import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { Logger } from 'pino';
import type { Metrics } from './metrics.ts';

export const METRICS_PATH = '/metrics';

/**
 * The metrics listener: `GET /metrics` in the Prometheus text format on a port of its own
 * (METRICS_PORT, on METRICS_HOST), apart from the public API, so that what it reveals (routes'
 * traffic, queue depths) is reachable only where the network lets Prometheus in. Anything else is
 * 404 (405 for another method on /metrics). A plain node:http server: no Express, no session, no
 * body read.
 */
export async function startMetricsServer(metrics: Metrics, options: { port: number; host: string; log: Logger }): Promise<Server> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path !== METRICS_PATH) {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end(`Not found: metrics are at ${METRICS_PATH}\n`);
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8' }).end('Method not allowed\n');
      return;
    }
    metrics.exposition().then(
      (body) => {
        res.writeHead(200, { 'content-type': metrics.contentType, 'cache-control': 'no-store' });
        res.end(req.method === 'HEAD' ? undefined : body);
      },
      (error: unknown) => {
        options.log.error({ err: error }, 'metrics: the exposition failed');
        res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('The metrics could not be collected.\n');
      },
    );
  });
  // Scrapers keep their connection; a scrape never takes long.
  server.keepAliveTimeout = 65_000;
  server.requestTimeout = 30_000;
  server.listen(options.port, options.host);
  await once(server, 'listening');
  return server;
}

/** The port the listener is bound to (the real one when METRICS_PORT is 0). */
export function portOf(server: Server): number {
  const address = server.address();
  return typeof address === 'object' && address ? address.port : 0;
}
