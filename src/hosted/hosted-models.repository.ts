import type { Knex } from 'knex';
import { ClusterRow } from '../db/models/clusters.ts';
import { DeployableModelRow } from '../db/models/deployable-models.ts';
import { HostedModelEndpointRow } from '../db/models/hosted-model-endpoints.ts';
import { InstanceRow } from '../db/models/instances.ts';

/** Every query of hosted models: the catalog's hosted models, the hosted clusters, their launches. */
type Db = Knex | Knex.Transaction;

/** A running hosted model with its cluster, as routing sees it. */
export interface HostedRoute {
  model_name: string;
  engine_model_uid: string;
  cluster_id: string;
  endpoint: string;
  sealed_credential: string | null;
  cluster_status: string;
  created_at: Date;
}

/** The running hosted models of enabled catalog entries on hosted clusters, oldest launch first. */
export async function findHostedRoutes(db: Db): Promise<HostedRoute[]> {
  return HostedModelEndpointRow.query(db)
    .alias('e')
    .join('clusters as c', 'c.id', 'e.cluster_id')
    .join('deployable_models as m', 'm.model_name', 'e.model_name')
    .where({ 'e.state': 'running', 'c.hosted': true, 'm.hosted': true, 'm.enabled': true })
    .whereNot('c.status', 'disabled')
    .select('e.model_name', 'e.engine_model_uid', 'e.cluster_id', 'e.created_at', 'c.endpoint', 'c.sealed_credential', 'c.status as cluster_status')
    .orderBy('e.created_at')
    .castTo<HostedRoute[]>();
}

/** The catalog's enabled hosted models, only `names` when given. */
export async function hostedCatalogModels(db: Db, names?: readonly string[]): Promise<DeployableModelRow[]> {
  const query = DeployableModelRow.query(db).where({ hosted: true, enabled: true }).orderBy('sort_order');
  if (names?.length) query.whereIn('model_name', names);
  return query;
}

/** The hosted clusters whose engine accepts the platform's credentials. */
export async function activeHostedClusters(db: Db): Promise<ClusterRow[]> {
  return ClusterRow.query(db).where({ hosted: true, status: 'active' }).orderBy('name');
}

/** Records a launch of the model on the cluster (or its new state when launched before); its id. */
export async function saveHostedEndpoint(
  db: Db,
  endpoint: Pick<HostedModelEndpointRow, 'model_name' | 'cluster_id' | 'engine_model_uid' | 'state' | 'state_reason'>,
): Promise<string> {
  const row = await HostedModelEndpointRow.query(db)
    .insert({ ...endpoint, engine_unhealthy_since: null })
    .onConflict(['cluster_id', 'model_name'])
    .merge(['engine_model_uid', 'state', 'state_reason', 'engine_unhealthy_since'])
    .returning('id')
    .castTo<{ id: string }>();
  return row.id;
}

/** The running hosted models on clusters whose engine accepts the platform's credentials: what the reconciler checks. */
export async function findRunningHostedEndpoints(db: Db): Promise<HostedModelEndpointRow[]> {
  return HostedModelEndpointRow.query(db)
    .alias('e')
    .join('clusters as c', 'c.id', 'e.cluster_id')
    .where({ 'e.state': 'running', 'c.status': 'active' })
    .select('e.*');
}

/** Records since when the engine reports a running hosted model not ready (`now`), or that it serves again (null). */
export async function recordHostedHealth(db: Db, id: string, since: 'now' | null): Promise<void> {
  await HostedModelEndpointRow.query(db)
    .findById(id)
    .where({ state: 'running' })
    .patch({ engine_unhealthy_since: since === 'now' ? db.fn.now() : null });
}

/** Marks a running hosted model failed (it no longer routes); whether it was running. */
export async function failHostedEndpoint(db: Db, id: string, reason: string): Promise<boolean> {
  const changed = await HostedModelEndpointRow.query(db)
    .findById(id)
    .where({ state: 'running' })
    .patch({ state: 'failed', state_reason: reason.slice(0, 1000), engine_unhealthy_since: null });
  return changed > 0;
}

/** Records the instance a launch was placed on. */
export async function placeHostedEndpoint(db: Db, id: string, instanceId: string): Promise<void> {
  await HostedModelEndpointRow.query(db).findById(id).patch({ instance_id: instanceId });
}

/** The engine worker of an instance (what a launch is pinned to). */
export async function workerOf(db: Db, instanceId: string): Promise<string> {
  const row = await InstanceRow.query(db).findById(instanceId).select('engine_worker');
  if (!row) throw new Error(`instance ${instanceId} does not exist`);
  return row.engine_worker;
}

/** Every launch of a hosted model, by model and cluster name. */
export async function listHostedEndpoints(db: Db): Promise<Array<HostedModelEndpointRow & { cluster_name: string }>> {
  return HostedModelEndpointRow.query(db)
    .alias('e')
    .join('clusters as c', 'c.id', 'e.cluster_id')
    .select('e.*', 'c.name as cluster_name')
    .orderBy(['e.model_name', 'c.name'])
    .castTo<Array<HostedModelEndpointRow & { cluster_name: string }>>();
}
