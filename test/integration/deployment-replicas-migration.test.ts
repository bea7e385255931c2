import type { Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase } from '../../src/db/database.ts';
import { createTestDatabase } from '../helpers/database.ts';

const MIGRATION = '20261201000000_deployment_replicas.ts';

let database: Awaited<ReturnType<typeof createTestDatabase>>;
let db: Knex;
beforeAll(async () => {
  database = await createTestDatabase();
  db = createDatabase({ url: database.url, poolMax: 2 });
});
afterAll(async () => {
  await db?.destroy();
  await database?.drop();
});

const at = (minutes: number) => new Date(Date.UTC(2026, 10, 20, 9, minutes));
const SERVICE_KEY = 'aws:us-east-1:gpu_instance:g5.12xlarge:a10g:1';

/** The deployments as the schema before the migration held them: by name, their id. */
async function seedDeployments(): Promise<Record<string, string>> {
  const [organization] = await db('organizations').insert({ name: 'Org', slug: 'org-replicas-migration' }).returning('id');
  const organizationId = (organization as { id: number }).id;
  const [user] = await db('users').insert({ email: 'owner@example.com', name: 'Owner', current_organization_id: organizationId }).returning('id');
  const model = await db('deployable_models').where({ model_name: 'qwen2.5-instruct' }).first('id');
  const [cluster] = await db('clusters').insert({ name: 'aws-cluster', provider: 'aws', region: 'us-east-1', endpoint: 'http://engine.example' }).returning('id');
  const type = await db('instance_types').where({ name: 'g5.12xlarge' }).first('id');
  const [instance] = await db('instances').insert({ cluster_id: (cluster as { id: string }).id, instance_type_id: type.id, engine_worker: 'worker-1:30001' }).returning('id');

  const ids: Record<string, string> = {};
  const deployment = async (name: string, status: string, placed?: { allocation: 'active' | 'released'; metering?: Record<string, Date | string | null> }) => {
    const [row] = await db('deployments')
      .insert({
        user_id: (user as { id: number }).id,
        organization_id: organizationId,
        deployable_model_id: model.id,
        model_name: 'qwen2.5-instruct',
        model_format: 'pytorch',
        model_size_in_billions: 7,
        quantization: 'none',
        model_engine: 'vLLM',
        status,
        created_at: at(0),
        status_changed_at: at(30),
        ...(status === 'terminated' ? { terminated_at: at(40) } : {}),
      })
      .returning('id');
    const id = (row as { id: string }).id;
    ids[name] = id;
    if (!placed) return;
    const [allocation] = await db('gpu_allocations')
      .insert({
        deployment_id: id,
        instance_id: (instance as { id: string }).id,
        gpu_count: 1,
        status: placed.allocation,
        created_at: at(1),
        released_at: placed.allocation === 'released' ? at(35) : null,
      })
      .returning('id');
    await db('deployments')
      .where({ id })
      .update({
        cluster_id: (cluster as { id: string }).id,
        instance_id: (instance as { id: string }).id,
        gpu_allocation_id: (allocation as { id: string }).id,
        engine_model_uid: `dep-${id.replaceAll('-', '')}`,
        selected_instance_type: 'g5.12xlarge',
        ...placed.metering,
      });
  };
  await deployment('requested', 'requested');
  await deployment('failedUnplaced', 'failed');
  await deployment('provisioning', 'provisioning', { allocation: 'active' });
  await deployment('starting', 'starting', { allocation: 'active' });
  await deployment('running', 'running', { allocation: 'active', metering: { running_since: at(10), accrued_until: at(20), gpu_service_key: SERVICE_KEY } });
  await deployment('terminating', 'terminating', { allocation: 'active', metering: { running_since: at(10), running_until: at(25), accrued_until: at(20), gpu_service_key: SERVICE_KEY } });
  await deployment('terminated', 'terminated', { allocation: 'released', metering: { running_since: at(10), running_until: at(25), accrued_until: at(25), gpu_service_key: SERVICE_KEY } });
  await deployment('failedHolding', 'failed', { allocation: 'active' });
  await deployment('failedReleased', 'failed', { allocation: 'released', metering: { running_since: at(10), running_until: at(15), accrued_until: at(15), gpu_service_key: SERVICE_KEY } });
  // The running deployment's closed seconds.
  await db('gpu_usage_intervals').insert([
    { deployment_id: ids.running, organization_id: organizationId, service_key: SERVICE_KEY, started_at: at(10), ended_at: at(15) },
    { deployment_id: ids.running, organization_id: organizationId, service_key: SERVICE_KEY, started_at: at(15), ended_at: at(20) },
  ]);
  return ids;
}

describe(`migration ${MIGRATION}`, () => {
  it('writes replica 0 of every placed deployment, its status from the deployment’s, with its allocation and its GPU seconds bookkeeping; down restores the deployments’', async () => {
    await db.migrate.down({ name: MIGRATION });
    const ids = await seedDeployments();
    const before = await db('deployments').whereIn('id', Object.values(ids)).select('id', 'gpu_allocation_id', 'running_since', 'running_until', 'accrued_until', 'gpu_service_key');

    await db.migrate.up({ name: MIGRATION });

    const replicas = await db('deployment_replicas').select('*');
    const replicaOf = (name: string) => replicas.find((replica) => replica.deployment_id === ids[name]);
    const statusOf = Object.fromEntries(Object.keys(ids).map((name) => [name, replicaOf(name)?.status ?? null]));
    expect(statusOf).toEqual({
      requested: null,
      failedUnplaced: null,
      provisioning: 'starting',
      starting: 'starting',
      running: 'ready',
      terminating: 'stopping',
      terminated: 'stopped',
      failedHolding: 'failed',
      failedReleased: 'stopped',
    });
    for (const row of before.filter((deployment) => deployment.gpu_allocation_id)) {
      const replica = replicas.find((candidate) => candidate.deployment_id === row.id);
      expect(replica).toMatchObject({
        ordinal: 0,
        engine_model_uid: `dep-${row.id.replaceAll('-', '')}`,
        gpu_allocation_id: row.gpu_allocation_id,
        created_at: at(1),
        running_since: row.running_since,
        running_until: row.running_until,
        accrued_until: row.accrued_until,
        gpu_service_key: row.gpu_service_key,
      });
    }
    expect(replicaOf('running')).toMatchObject({ ready_at: at(10), stopped_at: null });
    expect(replicaOf('terminated')).toMatchObject({ stopped_at: at(35) });
    expect(replicaOf('failedHolding')).toMatchObject({ ready_at: null, stopped_at: null });

    // The running deployment's intervals are its replica's; its GPU service is the replica's.
    expect(await db('gpu_usage_intervals').where({ deployment_id: ids.running }).distinct().pluck('replica_id')).toEqual([replicaOf('running')?.id]);
    expect(await db('deployment_gpu_services').where({ deployment_id: ids.running }).select('replica_id', 'service_key')).toEqual([{ replica_id: replicaOf('running')?.id, service_key: SERVICE_KEY }]);
    // The meter's work list and the summary's are the replicas': the running one and the terminating one.
    const { rows: due } = await db.raw<{ rows: Array<{ deployment_id: string }> }>(
      'select deployment_id from deployment_replicas where running_since is not null and (running_until is null or accrued_until is distinct from running_until) order by deployment_id',
    );
    expect(due.map((row) => row.deployment_id)).toEqual([ids.running, ids.terminating].sort());

    await db.migrate.down({ name: MIGRATION });
    const restored = await db('deployments').whereIn('id', Object.values(ids)).select('id', 'gpu_allocation_id', 'running_since', 'running_until', 'accrued_until', 'gpu_service_key');
    expect(restored.sort((a, b) => a.id.localeCompare(b.id))).toEqual(before.sort((a, b) => a.id.localeCompare(b.id)));
    await db.migrate.up({ name: MIGRATION });
    expect(await db('deployment_replicas').count({ n: '*' })).toEqual([{ n: '7' }]);
  });
});
