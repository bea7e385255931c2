import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findDeployment, transferDeployments } from '../../src/deployments/deployments.repository.ts';
import { insertDeployment, moveDeployment } from '../../src/deployments/deployment-changes.ts';
import { lockOrganization } from '../../src/organizations/organizations.repository.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { untilStatus, type Deployment } from '../factories/deployments.ts';
import { addedMember } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { createTestDatabase } from '../helpers/database.ts';
import { waitUntil } from '../helpers/net.ts';

/**
 * A member removed while one of their deployments is being provisioned: the removal hands the
 * deployment to its heir while the provisioning step moves it on, each in a transaction of its own.
 *
 * Postgres breaks a deadlock in the session whose deadlock check runs while the cycle exists: the
 * database's `deadlock_timeout` is raised so that check runs well after a test closes a cycle
 * (the session that began waiting first then breaks it), and the test's own sessions never check.
 */
let app: TestApp;
beforeAll(async () => {
  const database = await createTestDatabase();
  const admin = new pg.Client({ connectionString: database.url });
  await admin.connect();
  await admin.query(`alter database ${admin.escapeIdentifier(new URL(database.url).pathname.slice(1))} set deadlock_timeout = '3s'`);
  await admin.end();
  app = await startTestApp({}, { database, workers: true, cluster: { modelLoadMs: 100 } });
});
afterAll(() => app?.close());

/** A session of the test's own, in a transaction, that never breaks a deadlock itself. */
async function session(): Promise<{ client: pg.Client; pid: number; end(): Promise<void> }> {
  const client = new pg.Client({ connectionString: app.databaseUrl });
  await client.connect();
  await client.query("set deadlock_timeout = '10min'");
  const pid = (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid ?? 0;
  return { client, pid, end: () => client.end() };
}

/** The pid of a session waiting for a lock `holder` holds, once there is one. */
async function waiterOn(holder: number): Promise<number> {
  let waiter: number | undefined;
  await waitUntil(async () => {
    const { rows } = await app.db.raw<{ rows: Array<{ pid: number }> }>(
      "select pid from pg_stat_activity where wait_event_type = 'Lock' and ? = any(pg_blocking_pids(pid))",
      [holder],
    );
    waiter = rows[0]?.pid;
    return waiter !== undefined;
  }, `a session to wait for a lock of session ${holder}`);
  return waiter as number;
}

async function organizationWithMember(): Promise<{ owner: SignedInUser; member: SignedInUser; organizationId: number }> {
  const owner = await registeredUser(app);
  const { data: organization } = await owner.api.GET('/v1/organization');
  if (!organization) throw new Error('the owner has no organization');
  return { owner, member: await addedMember(app, organization.id, 'member'), organizationId: organization.id };
}

/** A `requested` deployment of the member's with no provisioning job: nothing but the test moves it. */
async function idleDeployment(userId: number, organizationId: number): Promise<string> {
  const model = await app.db('deployable_models').where({ model_name: 'qwen2.5-instruct' }).first('id');
  const row = await insertDeployment(app.db, {
    user_id: userId,
    organization_id: organizationId,
    deployable_model_id: model.id,
    model_name: 'qwen2.5-instruct',
    model_format: 'pytorch',
    model_size_in_billions: '7',
    quantization: 'none',
    model_engine: 'vllm',
  });
  return row.id;
}

const removeMember = (by: SignedInUser, userId: number) =>
  by.api.DELETE('/v1/organization/members/{user_id}', { params: { path: { user_id: userId } } });

describe('removing a member whose deployment is being provisioned', () => {
  it('answers 204 and hands the deployment to the remover, whose provisioning goes on', async () => {
    const { owner, member } = await organizationWithMember();
    // Holds the instances, which placing a deployment needs after locking its row: provisioning
    // then stops between the two, holding the deployment's row.
    const gate = await session();
    try {
      await gate.client.query('begin');
      await gate.client.query('select id from instances for update');
      const { data: created } = await member.api.POST('/api/v1/model-deployments', { body: { model_name: 'qwen2.5-instruct' } });
      if (!created) throw new Error('no deployment');
      const provisioning = await waiterOn(gate.pid);

      const removal = removeMember(owner, member.user.id);
      await waiterOn(provisioning);
      await gate.client.query('commit');

      const { response, error } = await removal;
      expect(response.status, JSON.stringify(error)).toBe(204);
      const running: Deployment = await untilStatus(owner, created.id, 'running', 20_000);
      expect(running.id).toBe(created.id);
      expect((await app.db('deployments').where({ id: created.id }).first('user_id')).user_id).toBe(owner.user.id);
    } finally {
      await gate.end();
    }
  });
});

describe('the order of the locks of a member change and a provisioning step', () => {
  it('a provisioning step that holds the deployment moves it on while a member change holds the organization', async () => {
    const { owner, member, organizationId } = await organizationWithMember();
    const deploymentId = await idleDeployment(member.user.id, organizationId);

    // The provisioning step's order: the deployment's row, then its event (which names the organization).
    let step!: Promise<boolean>;
    let release!: () => void;
    const stepHoldsRow = new Promise<void>((held) => {
      step = app.db.transaction(async (trx) => {
        await findDeployment(trx, deploymentId, { forUpdate: true });
        held();
        await new Promise<void>((resolve) => (release = resolve));
        return moveDeployment(trx, deploymentId, { from: 'requested', to: 'provisioning' });
      });
    });
    await stepHoldsRow;
    // A member change's order: the organization, then the member's deployments (waits for the step).
    const change = app.db.transaction(async (trx) => {
      await lockOrganization(trx, organizationId);
      await transferDeployments(trx, { organizationId, fromUserId: member.user.id, toUserId: owner.user.id });
    });
    const changeWaits = await waitUntil(
      async () => (await app.db.raw<{ rows: unknown[] }>("select 1 from pg_stat_activity where wait_event_type = 'Lock' and query like 'update \"deployments\"%'")).rows.length > 0,
      'the member change to wait for the deployment',
    ).then(() => true);
    expect(changeWaits).toBe(true);
    release();

    const outcomes = await Promise.allSettled([step, change]);
    expect(outcomes.map((outcome) => (outcome.status === 'rejected' ? String(outcome.reason) : 'committed'))).toEqual(['committed', 'committed']);
    expect(await app.db('deployments').where({ id: deploymentId }).first('status', 'user_id')).toEqual({ status: 'provisioning', user_id: owner.user.id });
  });
});

describe('a member change that loses a deadlock', () => {
  it('is run again: the removal answers 204', async () => {
    const { owner, member, organizationId } = await organizationWithMember();
    const deploymentId = await idleDeployment(member.user.id, organizationId);
    // A session that takes the locks in the other order: the member's deployment, then the organization.
    const other = await session();
    try {
      await other.client.query('begin');
      await other.client.query('select id from deployments where id = $1 for update', [deploymentId]);
      const removal = removeMember(owner, member.user.id);
      await waiterOn(other.pid);
      // Waits for the organization the removal holds: the removal, waiting longer, breaks the cycle.
      await other.client.query('select id from organizations where id = $1 for update', [organizationId]);
      await other.client.query('commit');

      const { response, error } = await removal;
      expect(response.status, JSON.stringify(error)).toBe(204);
      expect((await app.db('deployments').where({ id: deploymentId }).first('user_id')).user_id).toBe(owner.user.id);
      expect(await app.db('memberships').where({ organization_id: organizationId, user_id: member.user.id })).toEqual([]);
    } finally {
      await other.end();
    }
  });
});

describe('a member change that keeps colliding', () => {
  it('answers 503 with Retry-After once its attempts are spent, never 500, and changes nothing', async () => {
    const { owner, member, organizationId } = await organizationWithMember();
    // Postgres fails every attempt to delete this membership as it fails a transaction that cannot be serialized.
    await app.db.raw(`
      create function collide_on_membership() returns trigger language plpgsql as $$
      begin raise exception 'could not serialize access due to concurrent update' using errcode = '40001'; end $$;
      create trigger collide_on_membership before delete on memberships
        for each row when (old.user_id = ${Number(member.user.id)}) execute function collide_on_membership();
    `);
    try {
      const { response, error } = await removeMember(owner, member.user.id);
      expect(response.status).toBe(503);
      expect(error?.code).toBe('SERVICE_UNAVAILABLE');
      expect(response.headers.get('retry-after')).toBe('1');
      expect(await app.db('memberships').where({ organization_id: organizationId, user_id: member.user.id })).toHaveLength(1);
    } finally {
      await app.db.raw('drop trigger collide_on_membership on memberships; drop function collide_on_membership()');
    }
  });
});
