import type { Knex } from 'knex';
import { GpuAllocationRow } from '../db/models/gpu-allocations.ts';

/**
 * The GPU ledger: every GPU booked on an engine worker, by a dedicated deployment or a hosted
 * model, in `gpu_allocations`. There is one ledger per physical cluster, whichever registration a
 * booking came through: registrations with the same endpoint are one engine, so the GPUs used on a
 * worker are the sum of the active allocations on that worker through any of them. A cluster
 * registered twice (dedicated and `--hosted`) thus never offers a GPU a hosted model holds.
 *
 * Every booking takes the ledger's lock first (after the row lock of what it books for): one
 * transaction at a time decides on free GPUs, so none is booked twice.
 */
type Db = Knex | Knex.Transaction;

/** The advisory lock of the ledger (a transaction-level lock, released at commit or rollback). */
const LEDGER_LOCK = "hashtext('gpu-ledger')";

export async function lockGpuLedger(trx: Knex.Transaction): Promise<void> {
  await trx.raw(`select pg_advisory_xact_lock(${LEDGER_LOCK})`);
}

/** An available instance of an active cluster, with its type and the GPUs booked on its worker. */
export interface PlacementOption {
  id: string;
  cluster_id: string;
  provider: string;
  region: string;
  name: string;
  gpu_type: string;
  gpu_count: number;
  gpu_memory_gb: number;
  price_per_second: string;
  used_gpus: number;
}

/** Where to place: the instances of every dedicated cluster, or of one (hosted) cluster. */
export type PlacementScope = { dedicated: true } | { clusterId: string };

/**
 * The available instances of active clusters in `scope`, each with the GPUs booked on its engine
 * worker through any registration of its endpoint. A worker two registrations in scope share is
 * listed once (through the older registration).
 */
export async function placementOptions(db: Db, scope: PlacementScope): Promise<PlacementOption[]> {
  const { rows } = await db.raw<{ rows: PlacementOption[] }>(
    `select distinct on (c.endpoint, i.engine_worker)
            i.id, i.cluster_id, c.provider, c.region, t.name, t.gpu_type, t.gpu_count, t.gpu_memory_gb, t.price_per_second,
            coalesce((select sum(a.gpu_count)
                      from instances w
                      join clusters wc on wc.id = w.cluster_id and wc.endpoint = c.endpoint
                      join gpu_allocations a on a.instance_id = w.id and a.status = 'active'
                      where w.engine_worker = i.engine_worker), 0)::int as used_gpus
     from instances i
     join instance_types t on t.id = i.instance_type_id
     join clusters c on c.id = i.cluster_id
     where i.status = 'available' and c.status = 'active' and ${'dedicated' in scope ? 'not c.hosted' : 'c.id = :clusterId'}
     order by c.endpoint, i.engine_worker, c.created_at, c.id`,
    'dedicated' in scope ? {} : { clusterId: scope.clusterId },
  );
  return rows;
}

/** What holds an allocation: a deployment, or a hosted model's launch on a cluster. */
export type GpuHolder = { deploymentId: string } | { hostedEndpointId: string };

/** Books GPUs of an instance; the allocation's id. Call under the ledger's lock. */
export async function bookGpus(db: Db, holder: GpuHolder, instanceId: string, gpuCount: number): Promise<string> {
  const { id } = await GpuAllocationRow.query(db).insert({
    ...('deploymentId' in holder ? { deployment_id: holder.deploymentId } : { hosted_model_endpoint_id: holder.hostedEndpointId }),
    instance_id: instanceId,
    gpu_count: gpuCount,
  });
  return id;
}

/** The active allocation of a hosted model's launch, if it holds GPUs. */
export async function hostedAllocation(db: Db, hostedEndpointId: string): Promise<Pick<GpuAllocationRow, 'id' | 'instance_id' | 'gpu_count'> | undefined> {
  return GpuAllocationRow.query(db).where({ hosted_model_endpoint_id: hostedEndpointId, status: 'active' }).select('id', 'instance_id', 'gpu_count').first();
}

/** Releases the GPUs a holder has booked (none booked: nothing to do). */
export async function releaseGpus(db: Db, holder: GpuHolder): Promise<void> {
  await GpuAllocationRow.query(db)
    .where('deploymentId' in holder ? { deployment_id: holder.deploymentId } : { hosted_model_endpoint_id: holder.hostedEndpointId })
    .where({ status: 'active' })
    .patch(released(db));
}

/** Releases these allocations (one already released stays as it is). */
export async function releaseAllocations(db: Db, allocationIds: readonly string[]): Promise<void> {
  if (!allocationIds.length) return;
  await GpuAllocationRow.query(db).whereIn('id', allocationIds).where({ status: 'active' }).patch(released(db));
}

/** What releasing an allocation writes. */
function released(db: Db) {
  return { status: 'released' as const, released_at: db.fn.now() };
}
