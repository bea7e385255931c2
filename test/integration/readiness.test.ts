import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Readiness } from '../../src/platform/readiness.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { waitUntil } from '../helpers/net.ts';
import { startServiceProcess } from '../helpers/service-process.ts';

/**
 * Readiness (`/readyz`) apart from liveness (`/healthz`): not ready while draining after SIGTERM
 * (requests still answered), while migrations of this version are pending; Postgres unreachable is
 * in database-restart.test.ts.
 */
let app: TestApp;
beforeAll(async () => {
  app = await startTestApp();
});
afterAll(() => app.close());

const probe = async (base: string, path: string) => {
  const response = await fetch(`${base}${path}`);
  const body = (await response.json()) as { status?: string; detail?: string; code?: string };
  return { status: response.status, body, retryAfter: response.headers.get('retry-after') };
};

describe('readiness', () => {
  it('is ready once started, migrated and connected', async () => {
    expect(await probe(app.url, '/readyz')).toMatchObject({ status: 200, body: { status: 'ready' } });
  });

  it('answers 503 while migrations of this version are pending, and 200 once they are applied', async () => {
    // A new process's view: nothing read yet. The last migration is undone, as if the migration Job had not run it.
    const readiness = new Readiness(app.db);
    const [, undone] = (await app.db.migrate.down()) as [number, string[]];
    try {
      expect(undone).toHaveLength(1);
      expect(await readiness.reasons()).toEqual(['migrations_pending']);
    } finally {
      await app.db.migrate.latest();
    }
    expect(await readiness.reasons()).toEqual([]);
  });

  it('answers 503 while draining after SIGTERM, still answering requests, then exits', async () => {
    const child = await startServiceProcess(app, { ROLE: 'api', SHUTDOWN_DRAIN_SECONDS: '3' });
    try {
      const base = child.url as string;
      expect((await probe(base, '/readyz')).status).toBe(200);
      child.kill('SIGTERM');
      await waitUntil(async () => (await probe(base, '/readyz')).status === 503, 'readiness to answer 503 after SIGTERM', 2_000);
      expect(await probe(base, '/readyz')).toMatchObject({ status: 503, retryAfter: '5', body: { code: 'SERVICE_UNAVAILABLE', detail: expect.stringContaining('shutting down') } });
      // Draining is not dead: liveness and the routes still answer until the server closes.
      expect(await probe(base, '/healthz')).toMatchObject({ status: 200, body: { status: 'ok' } });
      expect(await child.exited).toBe(0);
    } finally {
      child.kill();
    }
  });
});
