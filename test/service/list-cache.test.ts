import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionPrincipal } from '../../src/principal.ts';
import { scopableDeployments } from '../../src/api-keys/api-keys.repository.ts';
import { OrganizationListCache, type LoadedList } from '../../src/organizations/list-cache.ts';
import { uniqueEmail } from '../factories/accounts.ts';
import { startServices, type Services } from '../helpers/services.ts';

/**
 * The kept copies of organizations' whole lists (`OrganizationListCache`) against the real schema:
 * what raises each of an organization's list versions (the deferred triggers of
 * 20261126100000_organization_list_versions, one version per list since 20261204000000), and when a kept list is read again.
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

type Versions = { invitations: number; api_keys: number; deployment_options: number };

/** The organization's list versions (0 before any change). */
const versionsOf = async (id: number): Promise<Versions> => {
  const row = await services.db('organization_list_versions').where({ organization_id: id }).first('invitations', 'api_keys', 'deployment_options');
  return { invitations: Number(row?.invitations ?? 0), api_keys: Number(row?.api_keys ?? 0), deployment_options: Number(row?.deployment_options ?? 0) };
};

/** Which of the organization's lists a change raised, each by how much. */
async function raisedBy(id: number, change: () => Promise<unknown>): Promise<Partial<Versions>> {
  const before = await versionsOf(id);
  await change();
  const after = await versionsOf(id);
  return Object.fromEntries(Object.entries(after).flatMap(([list, version]) => (version === before[list as keyof Versions] ? [] : [[list, version - before[list as keyof Versions]]])));
}

/** A loader that counts its reads and returns `size` items. */
function counted(size: number, validUntil?: number) {
  const loader = { reads: 0, load: async (): Promise<LoadedList<number[]>> => {
    loader.reads++;
    return { body: Array.from({ length: size }, (_, i) => i), size, ...(validUntil === undefined ? {} : { validUntil }) };
  } };
  return loader;
}

describe('the organization list versions', () => {
  it('rise at the commit of each change to what their list shows, once per transaction, and not before', async () => {
    const start = await versionsOf(organizationId);
    await services.db.transaction(async (trx) => {
      await trx('organizations').where({ id: organizationId }).update({ name: 'Renamed Ltd' });
      // Deferred to the commit: another reader sees no new version while the change is open.
      expect(await versionsOf(organizationId)).toEqual(start);
    });
    // The name shows in every invitation, and in no other list.
    expect(await versionsOf(organizationId)).toEqual({ ...start, invitations: start.invitations + 1 });
    // Once per transaction, however many of its rows changed.
    expect(
      await raisedBy(organizationId, () =>
        services.db.transaction(async (trx) => {
          for (const name of ['First Ltd', 'Second Ltd', 'Renamed Ltd']) await trx('organizations').where({ id: organizationId }).update({ name });
        }),
      ),
    ).toEqual({ invitations: 1 });

    let invitationId = 0;
    expect(await raisedBy(organizationId, async () => (invitationId = (await services.container.invitations.create(owner, { email: uniqueEmail('listed') })).id))).toEqual({
      invitations: 1,
    });
    // The mail worker's delivery status, in the emails table, is part of the invitation as listed.
    expect(await raisedBy(organizationId, () => services.db('emails').where({ invitation_id: invitationId }).update({ status: 'failed', last_error: 'mailbox full' }))).toEqual({
      invitations: 1,
    });
    // A change to a column no list shows leaves every version alone.
    expect(await raisedBy(organizationId, () => services.db('organizations').where({ id: organizationId }).update({ description: 'not listed' }))).toEqual({});
  });

  it('raise the key list for keys (not their use) and the deployments their scopes name, in the organization of the change only', async () => {
    const other = await services.owner();
    const otherStart = await versionsOf(other.organization?.id as number);
    let keyId = 0;
    expect(
      await raisedBy(organizationId, async () => {
        keyId = (await services.container.apiKeys.create(owner, { name: 'listed', deployment_ids: [], allow_hosted_models: true })).api_key.id;
      }),
    ).toEqual({ api_keys: 1 });
    // Its use does not (the key list is kept at most a minute instead).
    expect(await raisedBy(organizationId, () => services.db('api_keys').where({ id: keyId }).update({ last_used_at: services.db.fn.now() }))).toEqual({});
    expect(await raisedBy(organizationId, () => services.container.apiKeys.revoke(owner, keyId))).toEqual({ api_keys: 1 });
    expect(await versionsOf(other.organization?.id as number)).toEqual(otherStart);
  });

  it('raise the deployment options for every deployment change, and the key list only for a deployment a key names', async () => {
    const created = await raisedBy(organizationId, () => services.container.deployments.create(owner, { model_name: 'qwen2.5-instruct' }));
    expect(created).toEqual({ deployment_options: 1 });
    const [unscoped, scoped] = await Promise.all([1, 2].map(async () => (await services.container.deployments.create(owner, { model_name: 'qwen2.5-instruct' })).id));
    const setStatus = (id: string | undefined, status: string) => services.db('deployments').where({ id }).update({ status });
    // The churn of an organization with live deployments: the invitations and keys stay as kept.
    expect(await raisedBy(organizationId, () => setStatus(unscoped, 'provisioning'))).toEqual({ deployment_options: 1 });
    expect(await raisedBy(organizationId, () => services.container.apiKeys.create(owner, { name: 'scoped', deployment_ids: [scoped as string] }))).toEqual({ api_keys: 1 });
    // A key shows its scoped deployments' status.
    expect(await raisedBy(organizationId, () => setStatus(scoped, 'provisioning'))).toEqual({ deployment_options: 1, api_keys: 1 });
    // One transaction changing both: each list once.
    expect(
      await raisedBy(organizationId, () =>
        services.db.transaction(async (trx) => {
          await trx('deployments').where({ id: unscoped }).update({ status: 'starting' });
          await trx('deployments').where({ id: scoped }).update({ status: 'starting' });
        }),
      ),
    ).toEqual({ deployment_options: 1, api_keys: 1 });
    // A scoped deployment deleted leaves the keys through its scope's delete.
    const deleted = (await services.container.deployments.create(owner, { model_name: 'qwen2.5-instruct' })).id;
    await services.container.apiKeys.create(owner, { name: 'scoped to a deleted one', deployment_ids: [deleted] });
    expect(await raisedBy(organizationId, () => services.db('deployments').where({ id: deleted }).delete())).toEqual({ deployment_options: 1, api_keys: 1 });
    // A deployment moved to another organization leaves the lists of both.
    const other = (await services.owner()).organization?.id as number;
    const otherStart = await versionsOf(other);
    expect(await raisedBy(organizationId, () => services.db('deployments').where({ id: unscoped }).update({ organization_id: other }))).toEqual({ deployment_options: 1 });
    expect(await versionsOf(other)).toEqual({ ...otherStart, deployment_options: otherStart.deployment_options + 1 });
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

    // A change another list shows (the name, in invitations) leaves it kept; one of its own does not.
    await services.db('organizations').where({ id: organizationId }).update({ name: 'Changed again' });
    await cache.get(organizationId, 'api-keys', large.load);
    expect(large.reads).toBe(2);
    await services.container.apiKeys.create(owner, { name: 'changes the list', deployment_ids: [], allow_hosted_models: true });
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

describe('the kept deployment options under churn', () => {
  /** Each statement the database was sent while `work` ran. */
  async function statementsOf<T>(work: () => Promise<T>): Promise<{ result: T; statements: string[] }> {
    const statements: string[] = [];
    const record = (query: { sql: string }) => statements.push(query.sql);
    services.db.on('query', record);
    try {
      return { result: await work(), statements };
    } finally {
      services.db.off('query', record);
    }
  }
  const readsWhole = (statements: string[]) => statements.some((sql) => /from "deployments".*order by "created_at" desc/.test(sql));
  const readsChanges = (statements: string[]) => statements.some((sql) => sql.includes('deployment_option_changes'));

  let principal: SessionPrincipal;
  let org: number;
  const options = () => services.container.apiKeys.deploymentOptions(principal);
  /** The options as a fresh read shows them, and how the kept answer was made. */
  async function read() {
    const { result, statements } = await statementsOf(options);
    const truth = await scopableDeployments(services.db, org);
    expect(result.items).toEqual(truth);
    return { items: result.items, whole: readsWhole(statements), patched: readsChanges(statements) && !readsWhole(statements) };
  }
  const setStatus = (id: string, status: string) => services.db('deployments').where({ id }).update({ status });
  const create = async () => (await services.container.deployments.create(principal, { model_name: 'qwen2.5-instruct' })).id;

  beforeAll(async () => {
    principal = await services.owner();
    org = principal.organization?.id as number;
    for (let i = 0; i < 3; i++) await create();
    await options(); // marks the organization's list as large (the suite keeps every list)
  });

  it('patches the kept list with the deployments that changed, and reads it whole when one joins', async () => {
    expect(await read()).toMatchObject({ whole: true });
    expect(await read()).toMatchObject({ whole: false, patched: false });
    const [first, second, third] = (await read()).items.map((item) => item.id) as [string, string, string];

    await setStatus(second, 'provisioning');
    expect(await read()).toMatchObject({ patched: true });
    // Two transactions, each one version: both changes read.
    await setStatus(first, 'starting');
    await setStatus(third, 'failed');
    expect(await read()).toMatchObject({ patched: true });
    // Terminated: leaves the options.
    await setStatus(second, 'terminated');
    const afterTermination = await read();
    expect(afterTermination).toMatchObject({ patched: true });
    expect(afterTermination.items.map((item) => item.id)).toEqual([first, third]);

    // A new deployment has a place of its own in the order: the list is read whole.
    const fourth = await create();
    const afterCreation = await read();
    expect(afterCreation).toMatchObject({ whole: true });
    expect(afterCreation.items[0]?.id).toBe(fourth);
    // So is one whose created_at changed.
    await services.db('deployments').where({ id: third }).update({ created_at: services.db.raw(`now() + interval '1 hour'`) });
    expect(await read()).toMatchObject({ whole: true });
  });

  it('reads the whole list when the log no longer holds every version since the kept one', async () => {
    await read();
    const [item] = (await read()).items;
    await setStatus(item?.id as string, 'provisioning');
    await setStatus(item?.id as string, 'starting');
    // The older of the two versions, as if the log had been trimmed past it.
    const { deployment_options: latest } = await services.db('organization_list_versions').where({ organization_id: org }).first('deployment_options');
    await services.db('deployment_option_changes').where({ organization_id: org }).where('version', '<', latest).delete();
    expect(await read()).toMatchObject({ whole: true });
  });

  it('is read whole in the organization a deployment moves to, and patched in the one it leaves', async () => {
    const other = await services.owner();
    const otherOrg = other.organization?.id as number;
    const otherOptions = () => services.container.apiKeys.deploymentOptions(other);
    await otherOptions();
    await otherOptions();
    await read();
    const moving = (await read()).items[0]?.id as string;
    await services.db('deployments').where({ id: moving }).update({ organization_id: otherOrg });
    const left = await read();
    expect(left).toMatchObject({ patched: true });
    expect(left.items.map((item) => item.id)).not.toContain(moving);
    const { result, statements } = await statementsOf(otherOptions);
    expect(readsWhole(statements)).toBe(true);
    expect(result.items.map((item) => item.id)).toContain(moving);
  });
});

describe('the deployment options change log', () => {
  it('logs each deployment a transaction changes under the version it raised, keeps the last 1,000 versions, and stands for a bulk change with one "read whole" row', async () => {
    const principal = await services.owner();
    const org = principal.organization?.id as number;
    const ids = await Promise.all([0, 1, 2].map(async () => (await services.container.deployments.create(principal, { model_name: 'qwen2.5-instruct' })).id));
    const log = () => services.db('deployment_option_changes').where({ organization_id: org }).orderBy(['version', 'position']).select('version', 'position', 'deployment_id');
    const version = async () => Number((await services.db('organization_list_versions').where({ organization_id: org }).first('deployment_options')).deployment_options);

    await services.db.transaction(async (trx) => {
      await trx('deployments').where({ id: ids[0] }).update({ status: 'provisioning' });
      await trx('deployments').where({ id: ids[1] }).update({ status: 'provisioning' });
    });
    const raised = await version();
    expect((await log()).filter((row) => Number(row.version) === raised)).toEqual([
      { version: String(raised), position: 0, deployment_id: ids[0] },
      { version: String(raised), position: 1, deployment_id: ids[1] },
    ]);

    // One transaction changing more than 100 deployments logs 100 of them, then one "read whole" row.
    await services.db.transaction(async (trx) => {
      for (let i = 0; i < 101; i++) await trx('deployments').where({ id: ids[i % 3] }).update({ status: i % 2 ? 'starting' : 'provisioning' });
    });
    const bulk = (await log()).filter((row) => Number(row.version) === raised + 1);
    expect(bulk).toHaveLength(101);
    expect(bulk.at(-1)).toEqual({ version: String(raised + 1), position: 100, deployment_id: null });

    for (let i = 0; i < 1000; i++) await services.db('deployments').where({ id: ids[2] }).update({ status: i % 2 ? 'starting' : 'provisioning' });
    const versions = new Set((await log()).map((row) => Number(row.version)));
    const latest = await version();
    expect(versions.size).toBe(1000);
    expect(Math.min(...versions)).toBe(latest - 999);
  }, 60_000);
});
