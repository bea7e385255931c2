import type { Knex } from 'knex';
import { RECONCILE_QUEUE } from '../../src/deployments/provisioning.ts';
import { AUTOSCALE_QUEUE } from '../../src/deployments/scaling.ts';

/** Columns that change without a request asking (a key's use, the update trigger). */
const VOLATILE = ['updated_at', 'last_used_at'];

/**
 * What timers write whatever a request does, left out of every digest: the requests in flight each
 * API process reports once a second (`deployment_load`) and what the autoscaler remembers of them,
 * the per-minute request metrics (which count refused requests too, by design), and the chained
 * background jobs (a run queues the next).
 */
const WRITTEN_BY_TIMERS = ['deployment_load', 'deployment_autoscaling', 'deployment_metrics_minutes', 'api_key_metrics_minutes', RECONCILE_QUEUE, AUTOSCALE_QUEUE];

/**
 * A digest of every table of the database, one line per table, and of the jobs queued (an email,
 * a webhook delivery), to show that a request wrote nothing: `digest()` before and after, then
 * `changedTables`. Tables and queues a peer writes meanwhile (the brute-force counters a refused
 * sign-in counts toward, the payment processor's webhook events) are named in `named`; those timers
 * write are always left out (WRITTEN_BY_TIMERS).
 */
export async function tableDigester(db: Knex, named: readonly string[]): Promise<() => Promise<string>> {
  const skip = [...named, ...WRITTEN_BY_TIMERS];
  const { rows } = await db.raw<{ rows: Array<{ table_name: string }> }>(
    "select table_name from information_schema.tables where table_schema = 'public' and table_type = 'BASE TABLE' and table_name not like 'knex_%' and table_name <> all(?) order by table_name",
    [[...skip]],
  );
  const volatile = VOLATILE.map((column) => ` - '${column}'`).join('');
  const tables = rows.map(
    ({ table_name: table }) => `select '${table}' as t, md5(coalesce(string_agg(r, ',' order by r), '')) as d from (select (to_jsonb(x)${volatile})::text as r from "${table}" x) s`,
  );
  // Jobs queued (pg-boss's schema): each job's queue, id and data, not its state, which workers
  // change meanwhile; the schedule's own jobs and the queues named in `skip` left out.
  const jobs = `select 'pgboss.job' as t, md5(coalesce(string_agg(r, ',' order by r), '')) as d
    from (select j.name || ' ' || j.id || ' ' || coalesce(j.data::text, '') as r from pgboss.job j
          where not exists (select 1 from pgboss.schedule s where s.name = j.name) and j.name not in (${["''", ...skip.map((name) => `'${name.replace(/'/g, "''")}'`)].join(', ')})) s`;
  const query = [...tables, jobs].join(' union all ');
  return async () => {
    const { rows: digests } = await db.raw<{ rows: Array<{ t: string; d: string }> }>(query);
    return digests.map((row) => `${row.t}:${row.d}`).join('\n');
  };
}

/** The tables whose digest differs. */
export function changedTables(before: string, after: string): string[] {
  const earlier = new Set(before.split('\n'));
  return after
    .split('\n')
    .filter((line) => !earlier.has(line))
    .map((line) => line.split(':')[0] ?? line);
}
