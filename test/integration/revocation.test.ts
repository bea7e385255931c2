import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiKeysService } from '../../src/api-keys/api-keys.service.ts';
import { CHANGE_CHANNELS, ChangeListener } from '../../src/db/change-listener.ts';
import { createLogger } from '../../src/logger.ts';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import { invitedMember } from '../factories/organizations.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { seenWithin, waitUntil } from '../helpers/net.ts';
import { startServiceProcess, type ServiceProcess } from '../helpers/service-process.ts';

/**
 * Revocation everywhere at once: a change made through one API process is refused by another
 * within 1 second (DESIGN.md §3). API keys are cached per process, so their changes are announced
 * with `pg_notify` in the changing transaction and dropped from every process's cache on commit
 * (src/db/change-listener.ts); sessions and memberships are read from the database on every
 * request, so they need no announcement. Process A is this test's in-process service, B a separate
 * `node src/main.ts` with ROLE=api on the same database.
 */
const DEADLINE_MS = 1_000;
let app: TestApp;
let owner: SignedInUser;
let deploymentId: string;
let other: ServiceProcess;
let otherUrl: string;

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING }, { workers: true, cluster: { modelLoadMs: 20 } });
  owner = await registeredUser(app);
  deploymentId = (await deployment(app, owner, 'running')).id;
  other = await startServiceProcess(app, { ROLE: 'api' });
  otherUrl = other.url as string;
});
afterAll(async () => {
  other?.kill();
  await app?.close();
});

/** A chat completion with the key on process B: its status. */
async function chatOnB(key: string): Promise<number> {
  const response = await fetch(`${otherUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: deploymentId, messages: [{ role: 'user', content: 'hi' }] }),
  });
  await response.arrayBuffer();
  return response.status;
}

/** A session-authenticated read on process B with the user's cookies: its status. */
async function membersOnB(user: SignedInUser): Promise<number> {
  const cookie = [...user.browser.cookies].map(([name, value]) => `${name}=${value}`).join('; ');
  const response = await fetch(`${otherUrl}/v1/organization/members`, { headers: { cookie } });
  await response.arrayBuffer();
  return response.status;
}

/** Process B answers `status` to every probe sent more than the deadline after `since` (the change's answer). */
const refusedByB = (since: number, probe: () => Promise<number>, status: number, what: string) =>
  seenWithin(async () => (await probe()) === status, since, DEADLINE_MS, `process B to answer ${status} to ${what}`);

describe('a change made through one process, refused by another within 1 s', () => {
  it('a revoked key', async () => {
    const key = await apiKey(owner, [deploymentId]);
    expect(await chatOnB(key.key)).toBe(200);
    await owner.api.DELETE('/v1/organization/api-keys/{api_key_id}', { params: { path: { api_key_id: key.id } } });
    await refusedByB(performance.now(), () => chatOnB(key.key), 401, 'the revoked key');
  });

  it('a disabled key, and accepted again once re-enabled', async () => {
    const key = await apiKey(owner, [deploymentId]);
    expect(await chatOnB(key.key)).toBe(200);
    const patch = (status: 'active' | 'disabled') => owner.api.PATCH('/v1/organization/api-keys/{api_key_id}', { params: { path: { api_key_id: key.id } }, body: { status } });
    expect((await patch('disabled')).response.status).toBe(200);
    await refusedByB(performance.now(), () => chatOnB(key.key), 401, 'the disabled key');
    expect((await patch('active')).response.status).toBe(200);
    await refusedByB(performance.now(), () => chatOnB(key.key), 200, 'the re-enabled key');
  });

  it('a signed-out session', async () => {
    const user = await registeredUser(app);
    expect(await membersOnB(user)).toBe(200);
    const cookies = new Map(user.browser.cookies);
    await user.api.POST('/v1/user/logout');
    const since = performance.now();
    // The browser forgot its cookies; the stolen copy must not work on B either.
    user.browser.cookies.clear();
    for (const [name, value] of cookies) user.browser.cookies.set(name, value);
    await refusedByB(since, () => membersOnB(user), 401, 'the signed-out session');
  });

  it('a removed member', async () => {
    const member = await invitedMember(app, owner, 'member');
    expect(await membersOnB(member)).toBe(200);
    const removed = await owner.api.DELETE('/v1/organization/members/{user_id}', { params: { path: { user_id: member.user.id } } });
    expect(removed.response.status).toBe(204);
    await refusedByB(performance.now(), () => membersOnB(member), 401, 'the removed member’s session');
  });
});

describe('the change listener', () => {
  it('drops a key another process changed from this process’s cache, and everything after a lost connection', async () => {
    const log = createLogger('silent');
    const keys = new ApiKeysService(app.db);
    const listener = new ChangeListener(app.databaseUrl, log);
    listener.subscribe(CHANGE_CHANNELS.apiKey, { changed: (id) => keys.forget(Number(id)), resync: () => keys.forgetAll() });
    await listener.start();
    try {
      const [first, second] = [await apiKey(owner, [deploymentId]), await apiKey(owner, [deploymentId])];
      await keys.authenticate(first.key);
      await keys.authenticate(second.key);
      expect(keys.cacheSize).toBe(2);
      // Revoked through process A: only the notification can take it out of this cache (expiry never evicts).
      await owner.api.DELETE('/v1/organization/api-keys/{api_key_id}', { params: { path: { api_key_id: first.id } } });
      await waitUntil(async () => keys.cacheSize === 1, 'the revoked key to leave the cache');

      // The listener's connection is cut: once listening again, nothing cached is trusted.
      await app.db.raw("select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'model-deployment-service:changes' and pid <> pg_backend_pid()");
      await waitUntil(async () => keys.cacheSize === 0 && listener.listening, 'the cache to be flushed after reconnecting');
      await owner.api.DELETE('/v1/organization/api-keys/{api_key_id}', { params: { path: { api_key_id: second.id } } });
      await expect(keys.authenticate(second.key)).rejects.toMatchObject({ inference: { code: 'api_key_revoked' } });
    } finally {
      await listener.stop();
    }
  });
});
