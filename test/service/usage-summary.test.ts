import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionPrincipal } from '../../src/principal.ts';
import { upsertPrice } from '../../src/metering/metering.repository.ts';
import { parseServiceKey } from '../../src/metering/service-keys.ts';
import { usageSummary, type UsageSummary } from '../../src/metering/usage-summary.ts';
import { UsageRecorder, type UsageRecord } from '../../src/inference/usage.ts';
import { checkResponse } from '../helpers/contract.ts';
import { runningDeployment, startServices, type Services } from '../helpers/services.ts';
import { runningSince } from '../helpers/time-travel.ts';

/**
 * The usage summary of an organization for its current period: GPU seconds (closed intervals and the
 * seconds of running deployments not closed yet) and hosted-model tokens, per service, priced from
 * the price table in exact decimals. Time is simulated: replicas' `running_since` moved back, and
 * the meter's ticks and the summary computed at chosen instants.
 */
let services: Services;
beforeAll(async () => {
  services = await startServices({ MAX_ACTIVE_RESOURCES: '50' }, { cluster: { modelLoadMs: 20 } });
});
afterAll(() => services.close());

const organizationOf = (owner: SessionPrincipal) => owner.organization?.id ?? 0;
const at = (iso: string) => new Date(iso);
const tick = (instant: Date) => services.container.gpuMeter.tick(services.log, instant);
const serviceKeyOf = async (deploymentId: string): Promise<string> =>
  (await services.db('deployment_gpu_services').where({ deployment_id: deploymentId }).first()).service_key;

/** The summary, checked against the interface's Usage summary schema as the route will answer it. */
async function summaryOf(owner: SessionPrincipal, instant?: Date): Promise<UsageSummary> {
  const summary = await usageSummary(services.db, organizationOf(owner), instant);
  await checkResponse('GET', '/v1/billing/usage-summary', Response.json(summary));
  return summary;
}

describe('the usage summary', () => {
  it('prices the GPU seconds of the period, closed and not closed yet, exactly, at the price table’s price', async () => {
    const owner = await services.owner();
    const id = await runningDeployment(services, owner);
    await runningSince(services, id, at('2026-10-02T00:00:00Z'));
    const key = await serviceKeyOf(id);
    await upsertPrice(services.db, parseServiceKey(key), '0.000279');
    // Closed up to 1 281 000 s; 600 s more not closed yet when the summary is asked for.
    await tick(at('2026-10-16T19:50:00Z'));
    const summary = await summaryOf(owner, at('2026-10-16T20:00:00Z'));
    expect(summary).toEqual({
      organization_id: organizationOf(owner),
      period_start: '2026-10-01T00:00:00.000Z',
      period_end: '2026-11-01T00:00:00.000Z',
      currency: 'usd',
      usage_totals: [
        {
          meter: 'gpu_instance_seconds',
          unit: 'second',
          total_quantity: '1281600',
          service_key: key,
          display_name: expect.stringMatching(/^GPU instance \S+ \(\d+ x [A-Z0-9]+\), simulator$/),
          dimensions: { ...parseServiceKey(key) },
          unit_amount_decimal: '0.000279',
          unit_amount_currency: 'usd',
          // 1 281 600 × 0.000279 = 357.5664, rounded to the cent.
          estimated_amount: '357.57',
          estimated_amount_currency: 'usd',
        },
      ],
      meter_totals: [{ meter: 'gpu_instance_seconds', estimated_amount: '357.57', estimated_amount_currency: 'usd' }],
      estimated_total: '357.57',
      estimated_total_currency: 'usd',
      open_anomalies: 0,
    });
  });

  it('prices a running deployment by the service key it stored as it entered running, before and after its seconds are closed', async () => {
    const owner = await services.owner();
    const id = await runningDeployment(services, owner);
    await runningSince(services, id, at('2026-10-03T00:00:00Z'));
    const key = await serviceKeyOf(id);
    const stored = async () => ({
      ...(await services.db('deployment_replicas').where({ deployment_id: id }).first('gpu_service_key')),
      ...(await services.db('deployments').where({ id }).first('updated_at')),
    });
    const before = await stored();
    expect(before.gpu_service_key).toBe(key);
    const quantities = async (instant: Date) =>
      (await summaryOf(owner, instant)).usage_totals.map((total) => [total.service_key, total.total_quantity]);
    expect(await quantities(at('2026-10-03T00:10:00Z'))).toEqual([[key, '600']]);

    await tick(at('2026-10-03T00:05:00Z'));
    // Closing seconds is bookkeeping: the key and the deployment's updated_at stay.
    expect(await stored()).toEqual(before);
    // 300 s closed and 300 s not closed yet.
    expect(await quantities(at('2026-10-03T00:10:00Z'))).toEqual([[key, '600']]);
  });

  it('stores the key with the first accrual of a deployment whose GPU service had no price when it entered running', async () => {
    const owner = await services.owner();
    const id = await runningDeployment(services, owner);
    await runningSince(services, id, at('2026-10-04T00:00:00Z'));
    const key = await serviceKeyOf(id);
    // As if the service had no price row yet when the deployment entered running.
    await services.db('deployment_replicas').where({ deployment_id: id }).update({ gpu_service_key: null });
    expect((await summaryOf(owner, at('2026-10-04T00:10:00Z'))).usage_totals).toEqual([]);
    await tick(at('2026-10-04T00:05:00Z'));
    expect((await services.db('deployment_replicas').where({ deployment_id: id }).first('gpu_service_key')).gpu_service_key).toBe(key);
    const [total] = (await summaryOf(owner, at('2026-10-04T00:10:00Z'))).usage_totals;
    expect([total?.service_key, total?.total_quantity]).toEqual([key, '600']);
  });

  it('counts in each period only its own seconds of a deployment that ran across two', async () => {
    const owner = await services.owner();
    const id = await runningDeployment(services, owner);
    await runningSince(services, id, at('2026-09-30T23:00:00Z'));
    await tick(at('2026-10-01T00:30:00Z'));
    const [total] = (await summaryOf(owner, at('2026-10-01T01:00:00Z'))).usage_totals;
    expect(total?.total_quantity).toBe('3600');
    // The interval closed at 00:30 is clipped at the end of September too.
    const [september] = (await summaryOf(owner, at('2026-09-30T23:59:59Z'))).usage_totals;
    expect(september?.total_quantity).toBe('3600');
  });

  it('prices hosted-model tokens without a float rounding error, and leaves out dedicated and non-token usage', async () => {
    const owner = await services.owner();
    const dedicated = await services.container.deployments.create(owner, { model_name: 'qwen2.5-instruct' });
    const usages = new UsageRecorder(services.db, services.log);
    const usage = (overrides: Partial<UsageRecord>): UsageRecord => ({
      usageId: randomUUID(),
      requestId: 'req_summary',
      organizationId: organizationOf(owner),
      deploymentId: null,
      apiKeyId: null,
      userId: owner.user.id,
      route: '/v1/chat/completions',
      model: 'qwen2.5-instruct',
      promptTokens: 0,
      completionTokens: 0,
      totalTokens: 0,
      unit: 'token',
      quantity: 0,
      outcome: 'completed',
      estimated: false,
      recordedAt: new Date(),
      ...overrides,
    });
    usages.record(usage({ quantity: 600_000 }));
    usages.record(usage({ quantity: 400_000, outcome: 'aborted', estimated: true }));
    usages.record(usage({ quantity: 700, deploymentId: dedicated.id }));
    usages.record(usage({ quantity: 2, unit: 'image', route: '/v1/images/generations' }));
    await usages.flush();
    const key = 'platform::hosted_model:qwen2.5-instruct::';
    await upsertPrice(services.db, parseServiceKey(key), '0.000001005');

    const summary = await summaryOf(owner);
    expect(summary.usage_totals).toEqual([
      {
        meter: 'hosted_tokens',
        unit: 'token',
        total_quantity: '1000000',
        service_key: key,
        display_name: 'Hosted model qwen2.5-instruct',
        dimensions: { provider: 'platform', region: '', resource_kind: 'hosted_model', instance_type: 'qwen2.5-instruct', gpu_type: '', gpu_count: '' },
        unit_amount_decimal: '0.000001005',
        unit_amount_currency: 'usd',
        // 1 000 000 × 0.000001005 = 1.005 exactly, half a cent: up. Binary floats give 1.00 (below).
        estimated_amount: '1.01',
        estimated_amount_currency: 'usd',
      },
    ]);
    expect((1_000_000 * 0.000001005).toFixed(2)).toBe('1.00');
  });

  it('prices in US dollars only: a price in another currency is refused (the meters report dollars)', async () => {
    const dimensions = parseServiceKey('platform::hosted_model:euro-model::');
    await expect(services.db('prices').insert({ ...dimensions, unit_amount_decimal: '0.001', currency: 'eur' })).rejects.toThrow(/prices_currency_usd/);
    expect(await services.db('prices').where({ instance_type: 'euro-model' })).toEqual([]);
  });

  it('counts the open anomalies of the period', async () => {
    const owner = await services.owner();
    const now = new Date();
    const lastMonth = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 1, 15));
    // Raw rows: the reporting job that flags and resolves anomalies comes with the billing work.
    await services.db('usage_anomalies').insert([
      { organization_id: organizationOf(owner), meter: 'gpu_instance_seconds', kind: 'report_failed', detail: 'refused', usage_at: now },
      { organization_id: organizationOf(owner), meter: 'hosted_tokens', kind: 'report_failed', detail: 'refused', usage_at: now, resolved_at: now },
      { organization_id: organizationOf(owner), meter: 'hosted_tokens', kind: 'out_of_range', detail: 'too many', usage_at: lastMonth },
    ]);
    expect(await summaryOf(owner)).toMatchObject({ usage_totals: [], open_anomalies: 1 });
  });
});
