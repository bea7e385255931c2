import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionPrincipal } from '../../src/principal.ts';
import { startServices, type Services } from '../helpers/services.ts';

/**
 * The caches on the inference path (API key states, routing candidates) under concurrency: the
 * requests that miss a cache together send one query, not one each (at 64 connections every
 * expiry used to send ~35 identical queries).
 */
let services: Services;
let owner: SessionPrincipal;
/** A deployment of the owner's organization (requested: no workers run here), for the keys' scope. */
let deploymentId: string;
beforeAll(async () => {
  services = await startServices();
  owner = await services.owner();
  deploymentId = (await services.container.deployments.create(owner, { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 })).id;
});
afterAll(() => services.close());

/** Counts the statements sent to the database whose SQL matches `pattern` while `run` runs. */
async function statementsDuring(pattern: RegExp, run: () => Promise<unknown>): Promise<number> {
  let count = 0;
  const onQuery = (query: { sql: string }) => {
    if (pattern.test(query.sql)) count++;
  };
  services.db.on('query', onQuery);
  try {
    await run();
  } finally {
    services.db.off('query', onQuery);
  }
  return count;
}

describe('caches on the inference path', () => {
  it('looks a key up once for 20 concurrent authentications that miss the cache, and all of them get the caller', async () => {
    const { key, api_key } = await services.container.apiKeys.create(owner, { name: 'concurrent', deployment_ids: [deploymentId] });
    const principals: Array<{ keyId: number }> = [];
    const lookups = await statementsDuring(/"key_hash"/, async () => {
      principals.push(...(await Promise.all(Array.from({ length: 20 }, () => services.container.apiKeys.authenticate(key, '192.0.2.200')))));
    });
    expect(lookups).toBe(1);
    expect(principals.map((principal) => principal.keyId)).toEqual(Array(20).fill(api_key.id));
  });

  it('queries the routing candidates once for 20 concurrent resolutions of one caller that miss the cache', async () => {
    const { key } = await services.container.apiKeys.create(owner, { name: 'routing', deployment_ids: [deploymentId] });
    const principal = await services.container.apiKeys.authenticate(key, '192.0.2.201');
    const refusals: string[] = [];
    const queries = await statementsDuring(/from "deployments"/, async () => {
      const results = await Promise.allSettled(Array.from({ length: 20 }, () => services.container.router.resolve(principal, 'qwen2.5-instruct')));
      for (const result of results) refusals.push(result.status === 'rejected' ? String((result.reason as { code?: string }).code) : 'resolved');
    });
    expect(queries).toBe(1);
    // The organization has no deployment: every caller gets the same answer from the shared query.
    expect(refusals).toEqual(Array(20).fill('NOT_FOUND'));
  });
});
