import type { Server } from 'node:http';
import type { Knex } from 'knex';
import { inject } from 'vitest';
import { createApp } from '../../src/app.ts';
import { createDatabase } from '../../src/db/database.ts';
import { buildHandlers } from '../../src/http/handlers.ts';
import { authenticationNotBuilt } from '../../src/http/not-implemented.ts';
import { closeServer, listen } from '../../src/http/server.ts';
import { createLogger } from '../../src/logger.ts';
import { loadOpenApiDocument } from '../../src/openapi-document.ts';

export interface TestApp {
  /** Base URL, e.g. http://127.0.0.1:43567 */
  url: string;
  db: Knex;
  close(): Promise<void>;
}

/**
 * The real application on a loopback port, against the run's Postgres (or the database `databaseUrl`
 * names), with response validation on: a response that breaks the contract fails the test.
 */
export async function startTestApp(options: { databaseUrl?: string } = {}): Promise<TestApp> {
  const db = createDatabase({ url: options.databaseUrl ?? inject('databaseUrl'), poolMax: 4, acquireTimeoutMs: 2_000 });
  const document = loadOpenApiDocument();
  const app = await createApp({
    logger: createLogger('silent'),
    document,
    handlers: buildHandlers({ db, document }),
    security: authenticationNotBuilt,
    validateResponses: true,
  });
  const server: Server = await listen(app, 0, '127.0.0.1');
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('no address');
  return {
    url: `http://127.0.0.1:${address.port}`,
    db,
    close: async () => {
      await closeServer(server, 1_000);
      await db.destroy();
    },
  };
}
