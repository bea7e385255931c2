import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PRUNE_SESSIONS_QUEUE, SESSION_ABSOLUTE_LIFETIME_MS } from '../../src/accounts/sessions.ts';
import { jobDefinitions } from '../../src/container.ts';
import { startServices, type Services } from '../helpers/services.ts';

/** The daily prune of ended sessions (`prune-ended-sessions`), against the real schema. */
let services: Services;
beforeAll(async () => {
  services = await startServices();
});
afterAll(() => services.close());

const exists = async (id: string) => (await services.db('sessions').where({ id }).first('id')) !== undefined;

describe('pruning ended sessions', () => {
  it('deletes the sessions past their expiry or their absolute lifetime, and keeps the live ones', async () => {
    const live = await services.owner();
    const expired = await services.owner();
    const tooOld = await services.owner();
    await services.db('sessions').where({ id: expired.sessionId }).update({ expires_at: services.db.raw("now() - interval '1 second'") });
    // An older session with a later expiry than the absolute lifetime allows.
    await services.db('sessions').where({ id: tooOld.sessionId }).update({
      created_at: new Date(Date.now() - SESSION_ABSOLUTE_LIFETIME_MS - 60_000),
      expires_at: services.db.raw("now() + interval '1 day'"),
    });

    const job = jobDefinitions(services.container).find((definition) => definition.queue === PRUNE_SESSIONS_QUEUE);
    expect(job?.schedule).toBe('41 3 * * *');
    const logged: unknown[] = [];
    await job?.handle({}, { log: { info: (fields: unknown) => logged.push(fields) } } as never);

    expect([await exists(live.sessionId), await exists(expired.sessionId), await exists(tooOld.sessionId)]).toEqual([true, false, false]);
    expect(logged).toEqual([{ deleted: expect.any(Number) }]);
    // Nothing left to delete: a second run deletes nothing and says nothing.
    expect(await services.container.sessions.pruneEnded()).toBe(0);
    expect(await exists(live.sessionId)).toBe(true);
  });
});
