import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionPrincipal } from '../../src/principal.ts';
import { findGpuMeteringDue, insertGpuInterval } from '../../src/metering/metering.repository.ts';
import { findDeployment } from '../../src/deployments/deployments.repository.ts';
import { runningSince } from '../helpers/time-travel.ts';
import { runningDeployment, startServices, type Services } from '../helpers/services.ts';

/**
 * The `gpu_instance_seconds` meter: GPU seconds of a running deployment closed in intervals whose
 * bounds come from the data (when its replica entered and left `ready`, as the deployment entered
 * and left `running`), never from when a tick ran. Deployments run on the cluster simulator; their
 * time in `running` is simulated by moving their replica's `running_since` back and ticking at
 * chosen instants (`tick(log, at)`).
 */
let services: Services;
let owner: SessionPrincipal;
beforeAll(async () => {
  services = await startServices({ MAX_ACTIVE_RESOURCES: '50' }, { cluster: { modelLoadMs: 20 } });
  owner = await services.owner();
});
afterAll(() => services.close());

const meter = () => services.container.gpuMeter;
const tick = (at?: Date) => meter().tick(services.log, at);
const intervalsOf = (id: string) =>
  services.db('gpu_usage_intervals').where({ deployment_id: id }).orderBy('started_at').select('started_at', 'ended_at', 'quantity', 'service_key');
/** The deployment's replica (one today): its metering columns. */
const replicaOf = async (id: string) => services.db('deployment_replicas').where({ deployment_id: id, ordinal: 0 }).first();
const secondsOf = async (id: string) => (await intervalsOf(id)).reduce((sum, interval) => sum + Number(interval.quantity), 0);
const plus = (at: Date, seconds: number) => new Date(at.getTime() + seconds * 1000);

/** A running deployment that entered `running` an hour ago, at a whole second: that second. */
async function runningForAnHour(): Promise<{ id: string; since: Date }> {
  const id = await runningDeployment(services, owner);
  const since = new Date(Math.floor(Date.now() / 1000) * 1000 - 3600_000);
  await runningSince(services, id, since);
  return { id, since };
}

describe('GPU seconds of a running deployment', () => {
  it('records the second a deployment enters running, with the status change', async () => {
    const before = Math.floor(Date.now() / 1000) * 1000;
    const id = await runningDeployment(services, owner);
    const row = await replicaOf(id);
    expect(row?.running_since?.getTime()).toBeGreaterThanOrEqual(before);
    expect((row?.running_since?.getTime() ?? 0.5) % 1000).toBe(0);
    expect(row?.running_until).toBeNull();
    expect(await findGpuMeteringDue(services.db)).toContain(id);
  });

  it('accrues N seconds for N seconds of running, once, whatever the ticks that follow', async () => {
    const { id, since } = await runningForAnHour();
    const updatedAt = (await findDeployment(services.db, id))?.updated_at;
    const accruals = await tick(plus(since, 1800));
    // Bookkeeping: the deployment itself did not change.
    expect((await findDeployment(services.db, id))?.updated_at).toEqual(updatedAt);
    expect(accruals).toContainEqual({ deploymentId: id, seconds: 1800 });
    expect(await tick(plus(since, 1800))).not.toContainEqual(expect.objectContaining({ deploymentId: id }));
    expect(await tick(plus(since, 1000))).not.toContainEqual(expect.objectContaining({ deploymentId: id }));
    const intervals = await intervalsOf(id);
    expect(intervals).toEqual([{ started_at: since, ended_at: plus(since, 1800), quantity: '1800', service_key: expect.stringMatching(/^local:simulator:gpu_instance:/) }]);
  });

  it('adds nothing for concurrent ticks: the intervals stay contiguous and end at the latest tick', async () => {
    const { id, since } = await runningForAnHour();
    await Promise.all([60, 60, 61, 60, 59, 61].map((seconds) => tick(plus(since, seconds))));
    const intervals = await intervalsOf(id);
    expect(await secondsOf(id)).toBe(61);
    expect(intervals[0]?.started_at).toEqual(since);
    intervals.slice(1).forEach((interval, i) => expect(interval.started_at).toEqual(intervals[i]?.ended_at));
  });

  it('catches up missed ticks in one interval from where the last one ended', async () => {
    const { id, since } = await runningForAnHour();
    await tick(plus(since, 60));
    // The ticks of the next four minutes never ran (no worker).
    expect(await tick(plus(since, 300))).toContainEqual({ deploymentId: id, seconds: 240 });
    expect(await intervalsOf(id)).toEqual([
      expect.objectContaining({ started_at: since, ended_at: plus(since, 60), quantity: '60' }),
      expect.objectContaining({ started_at: plus(since, 60), ended_at: plus(since, 300), quantity: '240' }),
    ]);
  });

  it('closes a deployment stopped between two ticks at the second it left running, then leaves it alone', async () => {
    const { id, since } = await runningForAnHour();
    await tick(plus(since, 600));
    await services.container.deployments.delete(owner, id);
    const stopped = await findDeployment(services.db, id);
    expect(stopped?.status).toBe('terminating');
    const until: Date | null | undefined = (await replicaOf(id))?.running_until;
    if (!until) throw new Error('leaving running recorded no running_until');
    expect(until.getTime() - since.getTime()).toBeGreaterThan(3600_000 - 60_000);

    await tick();
    expect(await secondsOf(id)).toBe((until.getTime() - since.getTime()) / 1000);
    expect((await intervalsOf(id)).at(-1)?.ended_at).toEqual(until);
    expect(await findGpuMeteringDue(services.db)).not.toContain(id);
    await services.container.provisioner.terminate(id, services.log);
    expect((await findDeployment(services.db, id))?.status).toBe('terminated');
    await tick(plus(until, 3600));
    expect(await secondsOf(id)).toBe((until.getTime() - since.getTime()) / 1000);
  });

  it('counts nothing for a deployment that never ran', async () => {
    const { id } = await services.container.deployments.create(owner, { model_name: 'qwen2.5-instruct' });
    await services.container.deployments.delete(owner, id);
    await tick();
    expect(await services.db('deployment_replicas').where({ deployment_id: id }).whereNotNull('running_since')).toEqual([]);
    expect(await intervalsOf(id)).toEqual([]);
  });

  it('is refused by the table when an interval would repeat or overlap one already closed', async () => {
    const { id, since } = await runningForAnHour();
    await tick(plus(since, 120));
    const [closed] = await intervalsOf(id);
    const replica = await replicaOf(id);
    const interval = (start: Date, end: Date) => ({
      deployment_id: id,
      replica_id: replica.id,
      organization_id: owner.organization?.id ?? 0,
      service_key: closed?.service_key,
      started_at: start,
      ended_at: end,
    });
    const insert = (start: Date, end: Date) => services.db.transaction((trx) => insertGpuInterval(trx, interval(start, end)));
    await expect(insert(since, plus(since, 30))).rejects.toMatchObject({ nativeError: { code: '23505' } });
    await expect(insert(plus(since, 60), plus(since, 180))).rejects.toMatchObject({ nativeError: { code: '23P01' } });
    await expect(insert(plus(since, 120.5), plus(since, 180))).rejects.toMatchObject({ nativeError: { code: '23514' } });
    expect(await secondsOf(id)).toBe(120);
  });

  it('prices the seconds as the service the cluster sync listed, at its list price', async () => {
    const { id, since } = await runningForAnHour();
    await tick(plus(since, 10));
    const [interval] = await intervalsOf(id);
    const price = await services.db('prices').where({ service_key: interval?.service_key }).first();
    expect(price).toMatchObject({ meter: 'gpu_instance_seconds', unit: 'second', provider: 'local', region: 'simulator', resource_kind: 'gpu_instance' });
    const listed = await services.db('prices').where({ provider: 'local', instance_type: price.instance_type }).orderBy('id').pluck('gpu_count');
    expect(listed).toContain(price.gpu_count);
    const type = await services.db('instance_types').where({ name: price.instance_type }).first();
    // The deployment's share of the instance's list price: price × its GPUs / the instance's GPUs, exactly.
    const share = (BigInt(type.price_per_second.replace('.', '')) * BigInt(price.gpu_count) * 1000n) / BigInt(type.gpu_count);
    expect(price.unit_amount_decimal.replace('.', '').replace(/^0+/, '')).toBe(share.toString());
  });
});
