import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { EngineEvent } from '../adapters/xinference.ts';
import type { ClustersService } from '../clusters/clusters.service.ts';
import type { DeploymentReplicaRow } from '../db/models/deployment-replicas.ts';
import { recordEngineEvents, type ReplicaEngineEvent } from './deployment-changes.ts';
import { findDeployment, findReplicasOf } from './deployments.repository.ts';

/** The longest engine text an event keeps (`message`, as the spec's DeploymentEvent says). */
export const ENGINE_MESSAGE_LIMIT = 1000;

/** An engine model uid the platform launches (`engineModelUid`: `dep-<32 hex>`, `-r<k>` for replica k), with the engine's `-rep<n>` when it names its replica. */
const ENGINE_UID = /\bdep-[0-9a-f]{32}(?:-r\d+)?(?:-rep\d+)?\b/g;
/** Xinference's answer to an unknown uid lists every model it serves (`core/supervisor.py`, `get_model`). */
const AVAILABLE_UIDS = /Available model uids: \[[^\]]*\]/g;

/**
 * The serving engine's events of a deployment's replicas, brought into the deployment's event log
 * (`deployment.engine_event`; docs/events-and-webhooks.md, Engine events): read from the engine
 * (`GET /v1/models/{uid}/events`) when a replica fails to start, is lost, or stops or comes back
 * serving, and appended once each before the change they explain. Tenant-safe: only the engine uids
 * of the deployment's own replicas are asked for, and a text that names other models (the engine's
 * answer to an unknown uid lists every model it serves) has them left out. Best effort: an engine
 * that does not answer leaves the log without its events (logged), never the caller's change undone.
 */
export class EngineLog {
  readonly #db: Knex;
  readonly #clusters: ClustersService;

  constructor(deps: { db: Knex; clusters: ClustersService }) {
    this.#db = deps.db;
    this.#clusters = deps.clusters;
  }

  /** Appends the engine events of the deployment's replicas (those of `replicaIds`, or all not stopped) that its log does not hold yet. */
  async import(deploymentId: string, log: Logger, replicaIds?: readonly string[]): Promise<void> {
    try {
      const deployment = await findDeployment(this.#db, deploymentId);
      if (!deployment?.cluster_id) return;
      const replicas = (await findReplicasOf(this.#db, deploymentId)).filter((replica) => (replicaIds ? replicaIds.includes(replica.id) : replica.status !== 'stopped'));
      if (!replicas.length) return;
      const client = await this.#clusters.clientOf(deployment.cluster_id);
      const own = new Set(replicas.map((replica) => replica.engine_model_uid));
      const events: ReplicaEngineEvent[] = [];
      for (const replica of replicas) {
        for (const event of await client.events(replica.engine_model_uid)) events.push(toReplicaEvent(replica, event, own));
      }
      const appended = await recordEngineEvents(this.#db, deploymentId, events);
      if (appended) log.info({ deployment_id: deploymentId, engine_events: appended }, 'engine events added to the deployment’s events');
    } catch (error) {
      log.warn({ deployment_id: deploymentId, err: String(error) }, 'could not read the engine’s events of the deployment');
    }
  }
}

function toReplicaEvent(replica: Pick<DeploymentReplicaRow, 'ordinal'>, event: EngineEvent, own: ReadonlySet<string>): ReplicaEngineEvent {
  return { replica: replica.ordinal, level: event.level, occurredAt: event.occurredAt, message: tenantSafe(event.message, own) };
}

/**
 * The engine's text as a deployment's owner may read it: the uids of models not among `own` (the
 * deployment's replicas) left out, and the list of every model the engine serves dropped; cut at
 * ENGINE_MESSAGE_LIMIT characters.
 */
export function tenantSafe(text: string, own: ReadonlySet<string>): string {
  const safe = text
    .replace(AVAILABLE_UIDS, 'Available model uids: [not shown]')
    .replace(ENGINE_UID, (uid) => (own.has(uid.replace(/-rep\d+$/, '')) ? uid : '[another model]'));
  return safe.length > ENGINE_MESSAGE_LIMIT ? safe.slice(0, ENGINE_MESSAGE_LIMIT) : safe;
}
