import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionPrincipal } from '../../src/principal.ts';
import { upsertPrice, usageTotals, usageTotalsQuery, type Period, type UsageTotalRow } from '../../src/metering/metering.repository.ts';
import { parseServiceKey } from '../../src/metering/service-keys.ts';
import { maintainUsagePartitions } from '../../src/metering/usage-partitions.ts';
import { compactUsageRollups } from '../../src/metering/usage-rollups.ts';
import { insertUsageRecords, type NewUsageRecord } from '../../src/inference/inference.repository.ts';
import { UsageRecorder, type UsageRecord } from '../../src/inference/usage.ts';
import { nodesOf, planOf, type PlanNode } from '../helpers/query-plans.ts';
import { runningDeployment, startServices, type Services } from '../helpers/services.ts';

/**
 * Usage at scale (migration 20261125200000): `usage_records` partitioned by month, the usage
 * summary read from hourly rollups kept by triggers plus the raw rows of the partial hours at the
 * period's edges, and old months dropped whole once reported. The oracle is the summary as it was
 * computed before the rollups: a scan of every raw row of the period.
 */
let services: Services;
beforeAll(async () => {
  services = await startServices({ MAX_ACTIVE_RESOURCES: '50' }, { cluster: { modelLoadMs: 20 } });
});
afterAll(() => services.close());

const organizationOf = (owner: SessionPrincipal) => owner.organization?.id ?? 0;
const at = (iso: string) => new Date(iso);
const SECOND = 1000;
const HOUR = 3600 * SECOND;

const PRICED_MODELS = ['hosted-a', 'hosted-b'];
const MODELS = [...PRICED_MODELS, 'unpriced'];

function record(organizationId: number, recordedAt: Date, overrides: Partial<NewUsageRecord> = {}): NewUsageRecord {
  return {
    usage_id: randomUUID(),
    request_id: 'req_scale',
    organization_id: organizationId,
    deployment_id: null,
    api_key_id: null,
    user_id: null,
    route: 'POST /v1/chat/completions',
    model: PRICED_MODELS[0] ?? '',
    prompt_tokens: 0,
    completion_tokens: 0,
    total_tokens: 0,
    unit: 'token',
    quantity: 1,
    outcome: 'completed',
    estimated: false,
    created_at: recordedAt,
    ...overrides,
  };
}

/** The summary's totals computed from every raw row of the period (the query before the rollups). */
async function rawUsageTotals(organizationId: number, period: Period, now: Date): Promise<UsageTotalRow[]> {
  const { rows } = await services.db.raw<{ rows: UsageTotalRow[] }>(
    `with used (service_key, quantity) as (
       select service_key, extract(epoch from least(ended_at, :end) - greatest(started_at, :start))::bigint
       from gpu_usage_intervals
       where organization_id = :organization and started_at < :end and ended_at > :start
       union all
       select s.service_key,
              extract(epoch from least(coalesce(r.running_until, :now), :end) - greatest(coalesce(r.accrued_until, r.running_since), :start))::bigint
       from deployment_replicas r
       join deployment_gpu_services s on s.replica_id = r.id
       where r.organization_id = :organization and s.service_key is not null and r.running_since is not null
         and (r.running_until is null or r.accrued_until is distinct from r.running_until)
         and least(coalesce(r.running_until, :now), :end) > greatest(coalesce(r.accrued_until, r.running_since), :start)
       union all
       select p.service_key, u.quantity
       from usage_records u
       join prices p on p.resource_kind = 'hosted_model' and p.instance_type = u.model
       where u.organization_id = :organization and u.deployment_id is null and u.unit = 'token'
         and u.created_at >= :start and u.created_at < :end
     )
     select p.service_key, p.meter, p.unit, p.display_name, p.provider, p.region, p.resource_kind, p.instance_type,
            p.gpu_type, p.gpu_count, p.currency, sum(used.quantity)::text as total_quantity,
            trim_scale(p.unit_amount_decimal)::text as unit_amount_decimal,
            round(sum(used.quantity) * p.unit_amount_decimal, 2)::text as estimated_amount,
            (sum(used.quantity) * p.unit_amount_decimal)::text as exact_amount
     from used join prices p using (service_key)
     group by p.id
     order by p.meter, p.service_key`,
    { organization: organizationId, start: period.start, end: period.end, now },
  );
  return rows;
}

const partitionsOf = async (usageIds: string[]): Promise<string[]> =>
  (await services.db.raw<{ rows: Array<{ partition: string }> }>('select tableoid::regclass::text as partition from usage_records where usage_id = any(?) order by created_at', [usageIds])).rows.map(
    (row) => row.partition,
  );

/** Hosted tokens rolled up for the organization, folded or not. */
async function hostedRollup(organizationId: number): Promise<string> {
  const { rows } = await services.db.raw<{ rows: [{ total: string | null }] }>(
    `select sum(quantity)::text as total from (select quantity from usage_rollups where organization_id = :organization and meter = 'hosted_tokens'
       union all select quantity from usage_rollup_deltas where organization_id = :organization and meter = 'hosted_tokens') rolled_up`,
    { organization: organizationId },
  );
  return rows[0].total ?? '0';
}

describe('usage at scale', () => {
  let owner: SessionPrincipal;
  const begin = at('2026-08-01T00:00:00Z').getTime();
  const finish = at('2026-11-01T00:00:00Z').getTime();

  beforeAll(async () => {
    for (const model of PRICED_MODELS) await upsertPrice(services.db, parseServiceKey(`platform::hosted_model:${model}::`), '0.0000021');
    owner = await services.owner();
  });

  it('sums any period from the rollups and the edges exactly as a scan of the raw rows does', async () => {
    const organizationId = organizationOf(owner);
    // GPU intervals: one running deployment's seconds closed in intervals of a second to three
    // hours, one after the other, across hours and months.
    const deploymentId = await runningDeployment(services, owner);
    const { service_key: serviceKey, replica_id: replicaId } = await services.db('deployment_gpu_services').where({ deployment_id: deploymentId }).first();
    await upsertPrice(services.db, parseServiceKey(serviceKey), '0.000279');
    const lengths = fc.sample(fc.integer({ min: 1, max: 3 * 3600 }), { numRuns: 1500, seed: 19 });
    const intervals = [];
    for (let start = begin - 2 * HOUR, i = 0; start < finish; i++) {
      const end = start + (lengths[i % lengths.length] ?? 60) * SECOND;
      intervals.push({ deployment_id: deploymentId, replica_id: replicaId, organization_id: organizationId, service_key: serviceKey, started_at: new Date(start), ended_at: new Date(end) });
      start = end + (i % 7 === 0 ? 600 * SECOND : 0);
    }
    for (let i = 0; i < intervals.length; i += 500) await services.db('gpu_usage_intervals').insert(intervals.slice(i, i + 500));
    // Hosted usage at random instants, on the hour and at the months' bounds, in batches as the
    // recorder writes them; dedicated and non-token usage beside it (never priced as hosted tokens).
    const instants = fc.sample(fc.integer({ min: begin - HOUR, max: finish + HOUR }), { numRuns: 3000, seed: 7 });
    instants.push(begin, begin - 1, finish - 1, finish, at('2026-09-01T00:00:00Z').getTime(), at('2026-10-01T00:00:00Z').getTime() - 1);
    const records = instants.map((instant, i) =>
      record(organizationId, new Date(instant), {
        model: MODELS[i % MODELS.length],
        quantity: (i * 7919) % 5000,
        ...(i % 11 === 0 ? { deployment_id: deploymentId } : i % 13 === 0 ? { unit: 'image' as const } : {}),
      }),
    );
    for (let i = 0; i < records.length; i += 250) await insertUsageRecords(services.db, records.slice(i, i + 250));
    // The same batch written again (a flush retried after all) counts nothing twice.
    await insertUsageRecords(services.db, records.slice(0, 250));

    const now = at('2026-11-20T00:00:00Z');
    const check = async (period: Period): Promise<void> => {
      expect(await usageTotals(services.db, organizationId, period, now)).toEqual(await rawUsageTotals(organizationId, period, now));
    };
    await check({ start: new Date(begin), end: new Date(finish) });
    await check({ start: at('2026-09-01T00:00:00Z'), end: at('2026-10-01T00:00:00Z') });
    await check({ start: at('2026-09-15T10:20:30Z'), end: at('2026-10-15T10:20:30Z') });
    await check({ start: at('2026-09-15T10:20:30Z'), end: at('2026-09-15T10:50:00Z') });
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: begin - HOUR, max: finish }),
        fc.oneof(fc.integer({ min: 1, max: 2 * 3600 }), fc.integer({ min: 1, max: 40 * 86_400 })),
        async (start, seconds) => {
          await check({ start: new Date(start - (start % SECOND)), end: new Date(start - (start % SECOND) + seconds * SECOND) });
        },
      ),
      { numRuns: 40 },
    );

    // Folded into the rollups, by two folds at once: the same totals, each delta counted once.
    const deltas = Number((await services.db('usage_rollup_deltas').count({ n: '*' }).first())?.n);
    expect(deltas).toBeGreaterThan(0);
    const folds = await Promise.all([compactUsageRollups(services.db), compactUsageRollups(services.db)]);
    expect(folds[0] + folds[1]).toBe(deltas);
    expect(await services.db('usage_rollup_deltas').count({ n: '*' }).first()).toEqual({ n: '0' });
    await check({ start: new Date(begin), end: new Date(finish) });
    await check({ start: at('2026-09-15T10:20:30Z'), end: at('2026-10-15T10:20:30Z') });
  });

  it('keeps a month’s records in its partition, made ahead or late, and counts each record once across the month boundary', async () => {
    const other = await services.owner();
    const organizationId = organizationOf(other);
    const recorder = new UsageRecorder(services.db, services.log);
    const usage = (recordedAt: Date, quantity: number): UsageRecord => ({
      usageId: randomUUID(),
      requestId: 'req_boundary',
      organizationId,
      deploymentId: null,
      apiKeyId: null,
      userId: other.user.id,
      route: 'POST /v1/chat/completions',
      model: PRICED_MODELS[1] ?? '',
      promptTokens: 0,
      completionTokens: quantity,
      totalTokens: quantity,
      unit: 'token',
      quantity,
      outcome: 'completed',
      estimated: false,
      recordedAt,
    });
    // December 2027 has no partition yet: its records wait in the default partition.
    const lastOfNovember = usage(at('2027-11-30T23:59:59.999Z'), 300);
    const firstOfDecember = usage(at('2027-12-01T00:00:00.000Z'), 20);
    recorder.record(lastOfNovember);
    recorder.record(firstOfDecember);
    await recorder.flush();
    const ids = [lastOfNovember.usageId, firstOfDecember.usageId];
    expect(await partitionsOf(ids)).toEqual(['usage_records_default', 'usage_records_default']);
    expect(await hostedRollup(organizationId)).toBe('320');

    // The job, run in October 2027, makes October to December and moves the rows into theirs.
    const made = await maintainUsagePartitions(services.db, { retentionMonths: 13, reportsUsage: true, now: at('2027-10-05T00:00:00Z') });
    expect(made.created).toEqual(['usage_records_2027_10', 'usage_records_2027_11', 'usage_records_2027_12']);
    expect(await partitionsOf(ids)).toEqual(['usage_records_2027_11', 'usage_records_2027_12']);
    expect(await hostedRollup(organizationId)).toBe('320');
    // Run again: nothing more to make.
    expect((await maintainUsagePartitions(services.db, { retentionMonths: 13, reportsUsage: true, now: at('2027-10-06T00:00:00Z') })).created).toEqual([]);

    const quantityIn = async (period: Period) => (await usageTotals(services.db, organizationId, period, period.end))[0]?.total_quantity;
    expect(await quantityIn({ start: at('2027-11-01T00:00:00Z'), end: at('2027-12-01T00:00:00Z') })).toBe('300');
    expect(await quantityIn({ start: at('2027-12-01T00:00:00Z'), end: at('2028-01-01T00:00:00Z') })).toBe('20');
    expect(await quantityIn({ start: at('2027-11-15T08:30:00Z'), end: at('2027-12-15T08:30:00Z') })).toBe('320');
    expect(await quantityIn({ start: at('2027-11-30T23:59:59Z'), end: at('2027-12-01T00:00:00Z') })).toBe('300');

    // Written again (the recorder's retry after a lost answer): nothing doubles.
    await insertUsageRecords(services.db, [record(organizationId, lastOfNovember.recordedAt, { usage_id: lastOfNovember.usageId, model: PRICED_MODELS[1], quantity: 300 })]);
    expect(await hostedRollup(organizationId)).toBe('320');
    expect(await services.db('usage_records').where({ organization_id: organizationId }).count({ n: '*' }).first()).toEqual({ n: '2' });
  });

  it('drops months past the retention only once their billable usage was reported, keeping the rollups', async () => {
    const tenant = await services.owner();
    const organizationId = organizationOf(tenant);
    await maintainUsagePartitions(services.db, { retentionMonths: 13, reportsUsage: true, now: at('2025-01-10T00:00:00Z') });
    const reported = record(organizationId, at('2025-01-20T00:00:00Z'), { quantity: 40 });
    const waiting = record(organizationId, at('2025-02-20T00:00:00Z'), { quantity: 2 });
    const dedicatedOnly = record(organizationId, at('2025-03-20T00:00:00Z'), { quantity: 5, unit: 'request' });
    await insertUsageRecords(services.db, [reported, waiting, dedicatedOnly]);
    const [report] = await services
      .db('usage_reports')
      .insert({
        organization_id: organizationId,
        meter: 'hosted_tokens',
        customer_id: 'cus_test',
        identifier: `retention-${reported.usage_id}`,
        quantity: 40,
        amount: 0,
        cumulative_amount: 0,
        cumulative_micros: 0,
        value: 0,
        usage_at: reported.created_at,
        reported_at: new Date(),
      })
      .returning('id');
    await services.db('usage_records').where({ usage_id: reported.usage_id }).update({ usage_report_id: report.id, reported_at: new Date() });

    const outcome = await maintainUsagePartitions(services.db, { retentionMonths: 2, reportsUsage: true, now: at('2025-06-10T00:00:00Z') });
    expect(outcome.dropped).toEqual(['usage_records_2025_01', 'usage_records_2025_03']);
    expect(outcome.kept).toEqual(['usage_records_2025_02']);
    expect(await partitionsOf([reported.usage_id, waiting.usage_id, dedicatedOnly.usage_id])).toEqual(['usage_records_2025_02']);
    // The rollups stay: a summary of January still counts the tokens whose raw rows are gone.
    expect((await usageTotals(services.db, organizationId, { start: at('2025-01-01T00:00:00Z'), end: at('2025-02-01T00:00:00Z') }, at('2025-06-10T00:00:00Z')))[0]?.total_quantity).toBe('40');

    // With no payment processor nothing waits for a report: the month goes too.
    const withoutProcessor = await maintainUsagePartitions(services.db, { retentionMonths: 2, reportsUsage: false, now: at('2025-06-10T00:00:00Z') });
    expect(withoutProcessor.dropped).toEqual(['usage_records_2025_02']);
  });

  it('reads the summary through the rollups’ and the edges’ indexes, never a scan of a usage table', async () => {
    const period = { start: at('2026-09-15T10:20:30Z'), end: at('2026-10-15T10:20:30Z') };
    const statement = usageTotalsQuery(services.db, organizationOf(owner), period, at('2026-11-20T00:00:00Z')).toSQL().toNative();
    // Without sequential scans, if the planner can help it: a scan left in the plan means no index serves the query.
    const connection = (await services.db.client.acquireConnection()) as pg.Client;
    let plan: PlanNode;
    try {
      await connection.query('begin');
      await connection.query('set local enable_seqscan = off');
      plan = await planOf(connection, statement);
    } finally {
      await connection.query('rollback');
      await services.db.client.releaseConnection(connection);
    }
    const nodes = nodesOf(plan);
    const usageTables = /^(usage_records|usage_rollup|gpu_usage_intervals|deployments$|deployment_replicas$)/;
    expect(nodes.filter((node) => node['Node Type'] === 'Seq Scan' && usageTables.test(node['Relation Name'] ?? ''))).toEqual([]);
    const indexes = new Set(nodes.map((node) => node['Index Name']).filter((name) => name !== undefined));
    expect(indexes).toContain('usage_rollups_pkey');
    expect(indexes).toContain('usage_rollup_deltas_organization');
    expect(indexes).toContain('gpu_usage_intervals_span');
    expect(indexes).toContain('deployment_replicas_metered_by_organization');
    expect([...indexes].some((name) => /^usage_records_.*_organization_id_created_at_/.test(name ?? ''))).toBe(true);
  });
});

