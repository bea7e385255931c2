import type { Knex } from 'knex';
import { ClusterRow } from '../db/models/clusters.ts';
import { InstanceTypeRow } from '../db/models/instance-types.ts';
import { InstanceRow } from '../db/models/instances.ts';

/** Every query of the clusters area: clusters, their instances, and the instance types. */
type Db = Knex | Knex.Transaction;

/** What building a cluster's engine client needs. */
export const CLIENT_COLUMNS = ['id', 'name', 'endpoint', 'auth_mode', 'sealed_credential', 'sealed_management_credential', 'status', 'status_reason', 'engine_version'] as const;
export type ClientColumns = Pick<ClusterRow, (typeof CLIENT_COLUMNS)[number]>;

/** Columns a registration sets; registering a known name again replaces them. */
type Registration = Pick<
  ClusterRow,
  'name' | 'provider' | 'region' | 'endpoint' | 'auth_mode' | 'sealed_credential' | 'sealed_management_credential' | 'hosted' | 'replica_api'
>;

/** Adds the cluster, or updates the one of that name; either way it is active again. */
export async function upsertCluster(db: Db, cluster: Registration): Promise<ClusterRow> {
  return ClusterRow.query(db)
    .insert({ ...cluster, status: 'active', status_reason: null, status_changed_at: db.fn.now() })
    .onConflict('name')
    .merge(['provider', 'region', 'endpoint', 'auth_mode', 'sealed_credential', 'sealed_management_credential', 'hosted', 'replica_api', 'status', 'status_reason', 'status_changed_at'])
    .returning('*');
}

/** Makes an active or credentials_invalid cluster active again (not a disabled one); the row after, if it changed. */
export async function reactivateCluster(db: Db, clusterId: string): Promise<ClusterRow | undefined> {
  const [row] = await ClusterRow.query(db)
    .where({ id: clusterId })
    .whereIn('status', ['active', 'credentials_invalid'])
    .patch({ status: 'active', status_reason: null, status_changed_at: db.fn.now() })
    .returning('*');
  return row;
}

/** Records whether the cluster's engine has the replica API, as just detected; the row after. */
export async function recordReplicaApi(db: Db, clusterId: string, replicaApi: boolean): Promise<ClusterRow | undefined> {
  const [row] = await ClusterRow.query(db).where({ id: clusterId }).patch({ replica_api: replicaApi }).returning('*');
  return row;
}

/** Stops a cluster's calls; its name when this changed its status (it was not already stopped). */
export async function markCredentialsInvalid(db: Db, clusterId: string, reason: string): Promise<string | undefined> {
  const [row] = await ClusterRow.query(db)
    .where({ id: clusterId })
    .whereNot({ status: 'credentials_invalid' })
    .patch({ status: 'credentials_invalid', status_reason: reason, status_changed_at: db.fn.now() })
    .returning(['name']);
  return row?.name;
}

export async function findClusterByName(db: Db, name: string): Promise<ClusterRow | undefined> {
  return ClusterRow.query(db).where({ name }).first();
}

export async function findClientColumns(db: Db, clusterId: string): Promise<ClientColumns | undefined> {
  return ClusterRow.query(db).findById(clusterId).select(...CLIENT_COLUMNS);
}

/** Every cluster, by name. */
export async function listClusters(db: Db): Promise<ClusterRow[]> {
  return ClusterRow.query(db).orderBy('name');
}

export async function listInstanceTypes(db: Db): Promise<InstanceTypeRow[]> {
  return InstanceTypeRow.query(db);
}

/** Records an engine worker as an available instance of the type, or updates it. */
export async function upsertInstance(db: Db, instance: Pick<InstanceRow, 'cluster_id' | 'instance_type_id' | 'engine_worker'>): Promise<void> {
  await InstanceRow.query(db)
    .insert({ ...instance, status: 'available' })
    .onConflict(['cluster_id', 'engine_worker'])
    .merge(['instance_type_id', 'status']);
}

/** Marks unavailable the cluster's available instances whose worker is not among `workers`; their workers. */
export async function markMissingUnavailable(db: Db, clusterId: string, workers: readonly string[]): Promise<string[]> {
  const gone = await InstanceRow.query(db)
    .where({ cluster_id: clusterId, status: 'available' })
    .whereNotIn('engine_worker', workers.length ? workers : [''])
    .patch({ status: 'unavailable' })
    .returning('engine_worker');
  return gone.map((row) => row.engine_worker);
}

export async function recordSync(db: Db, clusterId: string, engine: { version: string; replicaApi: boolean }): Promise<void> {
  await ClusterRow.query(db).findById(clusterId).patch({ last_synced_at: db.fn.now(), engine_version: engine.version, replica_api: engine.replicaApi });
}
