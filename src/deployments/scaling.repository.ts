import type { Knex } from 'knex';
import { DeploymentReplicaRow } from '../db/models/deployment-replicas.ts';
import { DeploymentRow } from '../db/models/deployments.ts';
import { SERVING } from './deployment-states.ts';

/** The queries of scaling: the load the API processes report, what the autoscaler decides from, and replicas to act on. */
type Db = Knex | Knex.Transaction;

/** How long a load report counts: an API process writes one a second while it has requests for the deployment. */
export const LOAD_FRESH_SECONDS = 5;

/** One API process's requests of one deployment, written once a second (`deployment_load`, unlogged). */
export interface LoadReport {
  deploymentId: string;
  inFlight: number;
  held: number;
  /** Requests in flight on each replica (by replica id). */
  replicas: Record<string, number>;
  /** The last request it received for the deployment, if any since it started. */
  lastRequestAt: Date | null;
}

/** Writes this process's reports (one statement), replacing its previous ones of those deployments. */
export async function writeLoad(db: Db, processId: string, reports: readonly LoadReport[]): Promise<void> {
  if (!reports.length) return;
  await db.raw(
    `insert into deployment_load (deployment_id, process_id, in_flight, held, replicas, last_request_at, reported_at)
     select r.deployment_id, ?, r.in_flight, r.held, r.replicas, r.last_request_at, now()
     from jsonb_to_recordset(?::jsonb) as r (deployment_id uuid, in_flight int, held int, replicas jsonb, last_request_at timestamptz)
     where exists (select 1 from deployments d where d.id = r.deployment_id)
     on conflict (deployment_id, process_id) do update
       set in_flight = excluded.in_flight, held = excluded.held, replicas = excluded.replicas,
           last_request_at = coalesce(excluded.last_request_at, deployment_load.last_request_at), reported_at = excluded.reported_at`,
    [
      processId,
      JSON.stringify(
        reports.map((r) => ({
          deployment_id: r.deploymentId,
          in_flight: r.inFlight,
          held: r.held,
          replicas: r.replicas,
          last_request_at: r.lastRequestAt?.toISOString() ?? null,
        })),
      ),
    ],
  );
}

/** Drops reports no one reads any more (older than a minute): a process that stopped leaves its last ones. */
export async function pruneLoad(db: Db): Promise<void> {
  await db('deployment_load').where('reported_at', '<', db.raw("now() - interval '1 minute'")).delete();
}

/** What the autoscaler decides a running deployment's replicas from. */
export interface ScalingState {
  id: string;
  min_replicas: number;
  max_replicas: number;
  target_concurrency: number;
  scale_to_zero_after_seconds: number;
  desired_replicas: number;
  /** Requests in flight and held in every API process (fresh reports only). */
  load: number;
  /** Seconds since the last request any process reported, the deployment last moved, or a replica of it last became ready, whichever is latest. */
  idle_seconds: number;
  /** The latest request time a fresh report gave, to remember past the report's life. */
  reported_request_at: Date | null;
  /** The last request time remembered (`deployment_autoscaling`). */
  remembered_request_at: Date | null;
  fewer_wanted_since: Date | null;
  /** Replicas by status: serving (`ready`), `starting`, and on their way out (`draining`, `stopping`, or `failed` with GPUs still held). */
  ready: number;
  starting: number;
  leaving: number;
}

/**
 * The running deployments with what the autoscaler needs, in one query: those it may have to act
 * on (`which: 'elastic'`: bounds apart, able to go to zero, or replicas not yet at the desired
 * count), or all of them (the replicas' samples of the metrics).
 */
export async function readScalingStates(db: Db, which: 'elastic' | 'all' = 'elastic'): Promise<ScalingState[]> {
  const { rows } = await db.raw<{ rows: ScalingState[] }>(
    `select d.id, d.min_replicas, d.max_replicas, d.target_concurrency, d.scale_to_zero_after_seconds, d.desired_replicas,
            coalesce(l.load, 0)::int as load, l.last_request_at as reported_request_at, a.last_request_at as remembered_request_at, a.fewer_wanted_since,
            extract(epoch from now() - greatest(l.last_request_at, a.last_request_at, d.status_changed_at, r.last_ready_at))::float8 as idle_seconds,
            coalesce(r.ready, 0)::int as ready, coalesce(r.starting, 0)::int as starting, coalesce(r.leaving, 0)::int as leaving
     from deployments d
     left join lateral (
       select sum(in_flight + held) as load, max(last_request_at) as last_request_at
       from deployment_load where deployment_id = d.id and reported_at > now() - make_interval(secs => ?)
     ) l on true
     left join deployment_autoscaling a on a.deployment_id = d.id
     left join lateral (
       select count(*) filter (where status = 'ready') as ready, count(*) filter (where status = 'starting') as starting,
              count(*) filter (where status in ('draining', 'stopping', 'failed')) as leaving, max(ready_at) as last_ready_at
       from deployment_replicas where deployment_id = d.id and status in ('starting', 'ready', 'draining', 'stopping', 'failed')
     ) r on true
     where d.status = ? and (? or d.min_replicas = 0 or d.min_replicas <> d.max_replicas
       or coalesce(r.ready, 0) + coalesce(r.starting, 0) <> d.desired_replicas or coalesce(r.starting, 0) + coalesce(r.leaving, 0) > 0)`,
    [LOAD_FRESH_SECONDS, SERVING, which === 'all'],
  );
  return rows;
}

/** Whether an elastic deployment (able to go to zero, or with bounds apart) is on its way to running: the autoscaler will soon have work. */
export async function elasticDeploymentComing(db: Db): Promise<boolean> {
  const { rows } = await db.raw<{ rows: Array<{ coming: boolean }> }>(
    `select exists (select 1 from deployments where status in ('requested', 'provisioning', 'starting')
       and (min_replicas = 0 or min_replicas <> max_replicas)) as coming`,
  );
  return rows[0]?.coming ?? false;
}

/** Remembers what the autoscaler keeps between its runs for a deployment (a field left out is unchanged). */
export async function rememberScaling(
  db: Db,
  deploymentId: string,
  memory: { lastRequestAt?: Date | null; fewerWantedSince?: Date | null; shortfallReportedAt?: Date | null },
): Promise<void> {
  const row: Record<string, unknown> = { deployment_id: deploymentId };
  if (memory.lastRequestAt !== undefined) row.last_request_at = memory.lastRequestAt;
  if (memory.fewerWantedSince !== undefined) row.fewer_wanted_since = memory.fewerWantedSince;
  if (memory.shortfallReportedAt !== undefined) row.shortfall_reported_at = memory.shortfallReportedAt;
  const updates = Object.keys(row).filter((column) => column !== 'deployment_id');
  if (!updates.length) return;
  const merge = updates.map((column) =>
    column === 'last_request_at' ? db.raw('greatest(deployment_autoscaling.last_request_at, excluded.last_request_at)') : db.raw(`excluded.${column}`),
  );
  await db('deployment_autoscaling')
    .insert(row)
    .onConflict('deployment_id')
    .merge(Object.fromEntries(updates.map((column, i) => [column, merge[i]])));
}

/** When a capacity shortfall of the deployment was last reported (null: none since the last scale-up that succeeded). */
export async function shortfallReportedAt(db: Db, deploymentId: string): Promise<Date | null> {
  const row = await db('deployment_autoscaling').where({ deployment_id: deploymentId }).first<{ shortfall_reported_at: Date | null } | undefined>('shortfall_reported_at');
  return row?.shortfall_reported_at ?? null;
}

/** Writes the deployment's desired replicas if it is still running; false when it is not. */
export async function writeDesiredReplicas(trx: Knex.Transaction, deploymentId: string, desired: number): Promise<boolean> {
  return (await DeploymentRow.query(trx).findById(deploymentId).where({ status: SERVING }).patch({ desired_replicas: desired })) > 0;
}

/** Requests in flight on each replica of the deployment, summed over every API process's fresh report. */
export async function inFlightByReplica(db: Db, deploymentId: string): Promise<Map<string, number>> {
  const { rows } = await db.raw<{ rows: Array<{ replica_id: string; in_flight: string }> }>(
    `select e.key as replica_id, sum(e.value::int) as in_flight
     from deployment_load l, jsonb_each_text(l.replicas) e
     where l.deployment_id = ? and l.reported_at > now() - make_interval(secs => ?)
     group by e.key`,
    [deploymentId, LOAD_FRESH_SECONDS],
  );
  return new Map(rows.map((row) => [row.replica_id, Number(row.in_flight)]));
}

/** The deployment's replicas that may still have a model on the engine (a failed one too: its GPUs are held until the engine confirms it gone), by ordinal. */
export async function liveReplicas(db: Db, deploymentId: string): Promise<DeploymentReplicaRow[]> {
  return DeploymentReplicaRow.query(db).where({ deployment_id: deploymentId }).whereIn('status', ['starting', 'ready', 'draining', 'stopping', 'failed']).orderBy('ordinal');
}

/** The next ordinal of the deployment's replicas (ordinals are never reused: each names an engine model). */
export async function nextOrdinal(trx: Knex.Transaction, deploymentId: string): Promise<number> {
  const row = await DeploymentReplicaRow.query(trx).where({ deployment_id: deploymentId }).max('ordinal as top').first().castTo<{ top: number | null } | undefined>();
  return (row?.top ?? -1) + 1;
}

/** How many ready replicas the deployment has. */
export async function countReady(db: Db, deploymentId: string): Promise<number> {
  return DeploymentReplicaRow.query(db).where({ deployment_id: deploymentId, status: 'ready' }).resultSize();
}
