import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionPrincipal } from '../../src/principal.ts';
import { OrganizationListCache, type LoadedList } from '../../src/organizations/list-cache.ts';
import { uniqueEmail } from '../factories/accounts.ts';
import { startServices, type Services } from '../helpers/services.ts';

/**
 * The kept copies of organizations' whole lists (`OrganizationListCache`) against the real schema:
 * what raises an organization's list version (the deferred triggers of
 * 20261126100000_organization_list_versions), and when a kept list is read again.
 */
let services: Services;
let owner: SessionPrincipal;
let organizationId: number;
beforeAll(async () => {
  services = await startServices();
  owner = await services.owner();
  organizationId = owner.organization?.id as number;
});
afterAll(() => services.close());

const versionOf = async (id: number): Promise<number> =>
  Number((await services.db('organization_list_versions').where({ organization_id: id }).first('version'))?.version ?? 0);

/** A loader that counts its reads and returns `size` items. */
function counted(size: number, validUntil?: number) {
  const loader = { reads: 0, load: async (): Promise<LoadedList<number[]>> => {
    loader.reads++;
    return { body: Array.from({ length: size }, (_, i) => i), size, ...(validUntil === undefined ? {} : { validUntil }) };
  } };
  return loader;
}

describe('the organization list version', () => {
  it('rises at the commit of each change to what the lists show, and not before', async () => {
    const start = await versionOf(organizationId);
    await services.db.transaction(async (trx) => {
      await trx('organizations').where({ id: organizationId }).update({ name: 'Renamed Ltd' });
      // Deferred to the commit: another reader sees no new version while the change is open.
      expect(await versionOf(organizationId)).toBe(start);
    });
    const renamed = await versionOf(organizationId);
    expect(renamed).toBe(start + 1);
    // Once per transaction, however many of its rows changed.
    await services.db.transaction(async (trx) => {
      for (const name of ['First Ltd', 'Second Ltd', 'Renamed Ltd']) await trx('organizations').where({ id: organizationId }).update({ name });
    });
    expect(await versionOf(organizationId)).toBe(renamed + 1);

    const invitation = await services.container.invitations.create(owner, { email: uniqueEmail('listed') });
    const invited = await versionOf(organizationId);
    expect(invited).toBeGreaterThan(renamed + 1);
    // The mail worker's delivery status, in the emails table, is part of the invitation as listed.
    await services.db('emails').where({ invitation_id: invitation.id }).update({ status: 'failed', last_error: 'mailbox full' });
    const delivered = await versionOf(organizationId);
    expect(delivered).toBeGreaterThan(invited);

    // A change to a column no list shows leaves the version alone.
    await services.db('organizations').where({ id: organizationId }).update({ description: 'not listed' });
    expect(await versionOf(organizationId)).toBe(delivered);
  });

  it('is raised by keys (not by their use), their scopes and the deployments they name, in the organization of the change only', async () => {
    const other = await services.owner();
    const otherStart = await versionOf(other.organization?.id as number);
    const start = await versionOf(organizationId);
    const { api_key: key } = await services.container.apiKeys.create(owner, { name: 'listed', deployment_ids: [], allow_hosted_models: true });
    const created = await versionOf(organizationId);
    expect(created).toBeGreaterThan(start);
    // Its use does not (the key list is kept at most a minute instead).
    await services.db('api_keys').where({ id: key.id }).update({ last_used_at: services.db.fn.now() });
    expect(await versionOf(organizationId)).toBe(created);
    await services.container.apiKeys.revoke(owner, key.id);
    expect(await versionOf(organizationId)).toBeGreaterThan(created);
    expect(await versionOf(other.organization?.id as number)).toBe(otherStart);
  });
});

describe('OrganizationListCache', () => {
  it('reads a small list every time and keeps a large one until the version changes', async () => {
    const cache = new OrganizationListCache(services.db, { minItems: 3 });
    const small = counted(2);
    for (let i = 0; i < 3; i++) await cache.get(organizationId, 'invitations', small.load);
    expect(small.reads).toBe(3);

    const large = counted(5);
    // The first large read marks the organization; the second is kept under the version it read.
    expect(await cache.get(organizationId, 'api-keys', large.load)).toHaveLength(5);
    await cache.get(organizationId, 'api-keys', large.load);
    await cache.get(organizationId, 'api-keys', large.load);
    await cache.get(organizationId, 'api-keys', large.load);
    expect(large.reads).toBe(2);

    await services.db('organizations').where({ id: organizationId }).update({ name: 'Changed again' });
    await cache.get(organizationId, 'api-keys', large.load);
    await cache.get(organizationId, 'api-keys', large.load);
    expect(large.reads).toBe(3);
  });

  it('reads a kept list again once an item lapses by itself (validUntil), and keeps lists apart', async () => {
    const cache = new OrganizationListCache(services.db, { minItems: 0 });
    const lapsed = counted(4, Date.now() - 1);
    for (let i = 0; i < 4; i++) await cache.get(organizationId, 'invitations', lapsed.load);
    expect(lapsed.reads).toBe(4);

    const options = counted(1);
    await cache.get(organizationId, 'deployment-options', options.load);
    await cache.get(organizationId, 'deployment-options', options.load);
    await cache.get(organizationId, 'deployment-options', options.load);
    expect(options.reads).toBe(2);
    // Another organization's list of the same kind is its own.
    const other = (await services.owner()).organization?.id as number;
    expect(await cache.get(other, 'deployment-options', counted(7).load)).toHaveLength(7);
  });
});
