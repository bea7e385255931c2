import type { Knex } from 'knex';
import type { SketchCounts } from './latency-sketch.ts';
import { METRICS_RETENTION_DAYS } from './metrics-window.ts';

/** The queries of request metrics: minute rollups written, samples of replicas, series read back, old minutes pruned. */
type Db = Knex | Knex.Transaction;

/** What one owner's minute holds in a process (request-metrics.ts's `MinuteRollup`). */
interface RollupFigures {
  requests2xx: number;
  requests4xx: number;
  requests5xx: number;
  requests429: number;
  latency: { toJSON(): SketchCounts | null };
  ttft: { toJSON(): SketchCounts | null };
  tokensIn: number;
  tokensOut: number;
  held: number;
  heldMs: number;
}

export interface MinuteRollupRow<Owner> {
  owner: Owner;
  minute: Date;
  rollup: RollupFigures;
}

const COUNTS = ['requests_2xx', 'requests_4xx', 'requests_5xx', 'requests_429', 'tokens_in', 'tokens_out', 'held_requests', 'held_ms'] as const;

/** The upsert of one table: counts added, sketches merged, rows of owners that are gone skipped. */
function upsertSql(table: string, ownerColumn: string, ownerType: string, ownerTable: string): string {
  const columns = [...COUNTS, 'latency_sketch', 'ttft_sketch'];
  return `insert into ${table} (${ownerColumn}, minute, ${columns.join(', ')})
    select r.owner, r.minute, ${columns.map((c) => `r.${c}`).join(', ')}
    from jsonb_to_recordset(?::jsonb) as r (owner ${ownerType}, minute timestamptz, ${COUNTS.map((c) => `${c} bigint`).join(', ')}, latency_sketch jsonb, ttft_sketch jsonb)
    where exists (select 1 from ${ownerTable} o where o.id = r.owner)
    order by r.owner, r.minute
    on conflict (${ownerColumn}, minute) do update set
      ${COUNTS.map((c) => `${c} = ${table}.${c} + excluded.${c}`).join(',\n      ')},
      latency_sketch = metrics_sketch_merge(${table}.latency_sketch, excluded.latency_sketch),
      ttft_sketch = metrics_sketch_merge(${table}.ttft_sketch, excluded.ttft_sketch)`;
}

const DEPLOYMENT_UPSERT = upsertSql('deployment_metrics_minutes', 'deployment_id', 'uuid', 'deployments');
const KEY_UPSERT = upsertSql('api_key_metrics_minutes', 'api_key_id', 'integer', 'api_keys');

function recordsOf<Owner>(rows: readonly MinuteRollupRow<Owner>[]): string {
  return JSON.stringify(
    rows.map(({ owner, minute, rollup: r }) => ({
      owner,
      minute: minute.toISOString(),
      requests_2xx: r.requests2xx,
      requests_4xx: r.requests4xx,
      requests_5xx: r.requests5xx,
      requests_429: r.requests429,
      tokens_in: r.tokensIn,
      tokens_out: r.tokensOut,
      held_requests: r.held,
      held_ms: Math.round(r.heldMs),
      latency_sketch: r.latency.toJSON(),
      ttft_sketch: r.ttft.toJSON(),
    })),
  );
}

/** Adds one process's minutes to the rollups: one statement per table (rows sorted by owner and minute by the caller). */
export async function writeMinuteRollups(db: Db, deployments: readonly MinuteRollupRow<string>[], keys: readonly MinuteRollupRow<number>[]): Promise<void> {
  if (deployments.length) await db.raw(DEPLOYMENT_UPSERT, [recordsOf(deployments)]);
  if (keys.length) await db.raw(KEY_UPSERT, [recordsOf(keys)]);
}

/** A running deployment's replicas as the autoscaler saw them. */
export interface ReplicaSample {
  deploymentId: string;
  desired: number;
  ready: number;
}

/** Writes the replicas of every running deployment for the minute (one statement; a second sample of the minute replaces the first). */
export async function writeReplicaSamples(db: Db, minute: Date, samples: readonly ReplicaSample[]): Promise<void> {
  if (!samples.length) return;
  const sorted = [...samples].sort((a, b) => (a.deploymentId < b.deploymentId ? -1 : a.deploymentId > b.deploymentId ? 1 : 0));
  await db.raw(
    `insert into deployment_metrics_minutes (deployment_id, minute, replicas_desired, replicas_ready)
     select r.deployment_id, ?::timestamptz, r.desired, r.ready
     from jsonb_to_recordset(?::jsonb) as r (deployment_id uuid, desired integer, ready integer)
     where exists (select 1 from deployments d where d.id = r.deployment_id)
     order by r.deployment_id
     on conflict (deployment_id, minute) do update set replicas_desired = excluded.replicas_desired, replicas_ready = excluded.replicas_ready`,
    [minute.toISOString(), JSON.stringify(sorted.map((s) => ({ deployment_id: s.deploymentId, desired: s.desired, ready: s.ready })))],
  );
}

/** One step of a series as read: sums of the step's minutes, their sketches to merge, and the replicas' peaks. */
export interface StepRow {
  /** Start of the step, Unix seconds. */
  t: number;
  requests_2xx: number;
  requests_4xx: number;
  requests_5xx: number;
  requests_429: number;
  tokens_in: number;
  tokens_out: number;
  held_requests: number;
  latency_sketches: SketchCounts[] | null;
  ttft_sketches: SketchCounts[] | null;
  replicas_desired?: number | null;
  replicas_ready?: number | null;
}

export interface StepRange {
  start: Date;
  end: Date;
  stepMs: number;
}

function stepsSql(table: string, ownerColumn: string, withReplicas: boolean): string {
  return `select (floor(extract(epoch from minute) / ?) * ?)::bigint as t,
      ${COUNTS.filter((c) => c !== 'held_ms').map((c) => `sum(${c})::float8 as ${c}`).join(', ')},
      jsonb_agg(latency_sketch) filter (where latency_sketch is not null) as latency_sketches,
      jsonb_agg(ttft_sketch) filter (where ttft_sketch is not null) as ttft_sketches
      ${withReplicas ? ', max(replicas_desired) as replicas_desired, max(replicas_ready) as replicas_ready' : ''}
    from ${table}
    where ${ownerColumn} = ? and minute >= ? and minute < ?
    group by 1 order by 1`;
}

const DEPLOYMENT_STEPS = stepsSql('deployment_metrics_minutes', 'deployment_id', true);
const KEY_STEPS = stepsSql('api_key_metrics_minutes', 'api_key_id', false);

/** A deployment's steps with any minute written (the primary key's range). */
export async function readDeploymentSteps(db: Db, deploymentId: string, range: StepRange): Promise<StepRow[]> {
  const seconds = range.stepMs / 1000;
  const { rows } = await db.raw<{ rows: StepRow[] }>(DEPLOYMENT_STEPS, [seconds, seconds, deploymentId, range.start.toISOString(), range.end.toISOString()]);
  return rows.map((row) => ({ ...row, t: Number(row.t) }));
}

/** An API key's steps with any minute written. */
export async function readKeySteps(db: Db, apiKeyId: number, range: StepRange): Promise<StepRow[]> {
  const seconds = range.stepMs / 1000;
  const { rows } = await db.raw<{ rows: StepRow[] }>(KEY_STEPS, [seconds, seconds, apiKeyId, range.start.toISOString(), range.end.toISOString()]);
  return rows.map((row) => ({ ...row, t: Number(row.t) }));
}

/**
 * A deployment's GPU seconds by step: each metered interval (`gpu_usage_intervals`, a replica's
 * instance seconds) split over the steps it overlaps. Intervals are written as the GPU meter
 * accrues them, so the last minutes fill in as it runs.
 */
export async function readGpuSecondsSteps(db: Db, deploymentId: string, range: StepRange): Promise<{ t: number; gpu_seconds: number }[]> {
  const seconds = range.stepMs / 1000;
  const { rows } = await db.raw<{ rows: { t: string; gpu_seconds: number }[] }>(
    `with intervals as (
       select started_at, ended_at from gpu_usage_intervals
       where deployment_id = ?::uuid and started_at < ?::timestamptz and ended_at > ?::timestamptz
     )
     select extract(epoch from s.at)::bigint as t,
            sum(extract(epoch from least(i.ended_at, s.at + make_interval(secs => ?)) - greatest(i.started_at, s.at)))::float8 as gpu_seconds
     from intervals i
     join generate_series(?::timestamptz, ?::timestamptz - make_interval(secs => ?), make_interval(secs => ?)) s(at)
       on i.started_at < s.at + make_interval(secs => ?) and i.ended_at > s.at
     group by s.at order by s.at`,
    [deploymentId, range.end.toISOString(), range.start.toISOString(), seconds, range.start.toISOString(), range.end.toISOString(), seconds, seconds, seconds],
  );
  return rows.map((row) => ({ t: Number(row.t), gpu_seconds: row.gpu_seconds }));
}

/** Deletes up to `limit` minutes of the table older than the retention (by its `minute` index). */
export async function pruneMinuteRollups(db: Db, table: 'deployment_metrics_minutes' | 'api_key_metrics_minutes', limit: number): Promise<number> {
  const { rowCount } = await db.raw<{ rowCount: number }>(
    `delete from ${table} where ctid in (select ctid from ${table} where minute < now() - make_interval(days => ?) limit ?)`,
    [METRICS_RETENTION_DAYS, limit],
  );
  return rowCount;
}
