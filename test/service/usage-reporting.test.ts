import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionPrincipal } from '../../src/accounts/principal.ts';
import { StripePaymentProcessor } from '../../src/adapters/stripe.ts';
import { PaymentProcessorError, type PaymentProcessor, type ProcessorMeterPrice } from '../../src/billing/payment-processor.ts';
import { REPORT_USAGE_QUEUE, UsageReporter } from '../../src/billing/usage-reporting.ts';
import { jobDefinitions } from '../../src/container.ts';
import { usageSummary } from '../../src/billing/usage-summary.ts';
import { waitUntil } from '../helpers/net.ts';
import { runningDeployment, startServices, type Services } from '../helpers/services.ts';
import { onEmulator, startStripeTarget, type StripeTarget } from '../helpers/stripe.ts';
import { runningSince } from '../helpers/time-travel.ts';

/**
 * Reporting GPU seconds to the processor's meter through the real `stripe` SDK (the Stripe emulator,
 * or Stripe test mode with STRIPE_TEST_SECRET_KEY): a deployment running N simulated seconds is
 * counted N times on the processor's meter, whatever crashes, retries and concurrent runs happen.
 */
let services: Services;
let target: StripeTarget;
let processor: StripePaymentProcessor;
let gpuMeter: ProcessorMeterPrice;
let tokenMeter: ProcessorMeterPrice;
const run = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;

beforeAll(async () => {
  target = await startStripeTarget();
  const stripe = {
    STRIPE_SECRET_KEY: target.secretKey,
    STRIPE_PUBLISHABLE_KEY: target.emulator?.publishableKey ?? 'pk_test_unused',
    STRIPE_WEBHOOK_SECRET: 'whsec_test',
    ...(target.apiUrl ? { STRIPE_API_URL: target.apiUrl } : {}),
  };
  // Payment setup is not under test here: enforcement off, so deployments are created without it.
  services = await startServices({ MAX_ACTIVE_RESOURCES: '50', BILLING_ENFORCEMENT: 'false', ...stripe }, { cluster: { modelLoadMs: 20 } });
  processor = new StripePaymentProcessor({ secretKey: target.secretKey, webhookSecret: 'whsec_test', apiUrl: target.apiUrl });
  const meters = await processor.ensureMeterPrices({ currency: 'usd', unitAmountDecimal: { gpu_instance_seconds: '0.05', hosted_tokens: '0.0002' } });
  gpuMeter = meters.find((meter) => meter.meter === 'gpu_instance_seconds') as ProcessorMeterPrice;
  tokenMeter = meters.find((meter) => meter.meter === 'hosted_tokens') as ProcessorMeterPrice;
});
afterAll(async () => {
  await target?.stop();
  await services?.close();
});

const organizationOf = (owner: SessionPrincipal) => owner.organization?.id ?? 0;

/** Two hours ago, on a minute: the processor takes events of the past 35 days, and summarises by minute. */
const T0 = new Date(Math.floor(Date.now() / 60_000) * 60_000 - 2 * 3_600_000);
const after = (seconds: number) => new Date(T0.getTime() + seconds * 1000);

/** An organization with a processor customer and a deployment running since T0, its seconds closed at the given offsets. */
async function meteredOrganization(closedAt: number[], withCustomer = true): Promise<{ owner: SessionPrincipal; customerId: string | undefined }> {
  const owner = await services.owner();
  const id = await runningDeployment(services, owner);
  await runningSince(services, id, T0);
  for (const seconds of closedAt) await services.container.gpuMeter.accrue(id, after(seconds));
  if (!withCustomer) return { owner, customerId: undefined };
  const customer = await processor.ensureCustomer({ key: `org-${run}-${organizationOf(owner)}`, organizationId: organizationOf(owner), name: 'Org' });
  await services.db('billing_accounts').where({ organization_id: organizationOf(owner) }).update({ processor_customer_id: customer.id });
  return { owner, customerId: customer.id };
}

const meterTotal = (customerId: string) =>
  processor.meterTotal({ meterId: gpuMeter.meterId, customerId, start: new Date(T0.getTime() - 3_600_000), end: new Date(T0.getTime() + 3 * 3_600_000) });

async function expectMeterTotal(customerId: string, seconds: number): Promise<void> {
  await waitUntil(async () => (await meterTotal(customerId)) === seconds, `the meter total to be ${seconds}`, onEmulator ? 5_000 : 120_000);
}

async function unreportedIntervals(owner: SessionPrincipal): Promise<number> {
  const [row] = await services.db('gpu_usage_intervals').where({ organization_id: organizationOf(owner) }).whereNull('reported_at').count({ n: '*' });
  return Number(row?.n);
}

/** The processor, refusing every event after the first `afterAccepted`. */
function refusingAfter(afterAccepted: number): PaymentProcessor {
  let accepted = 0;
  return Object.assign(Object.create(processor) as PaymentProcessor, {
    async reportMeterEvent(input: Parameters<PaymentProcessor['reportMeterEvent']>[0]) {
      if (accepted >= afterAccepted) throw new PaymentProcessorError('processor unavailable', { status: 503 });
      await processor.reportMeterEvent(input);
      accepted++;
    },
  });
}

const failing: PaymentProcessor = Object.assign(Object.create(null) as PaymentProcessor, {
  async reportMeterEvent() {
    throw new PaymentProcessorError('processor unavailable', { status: 503 });
  },
});

describe('reporting usage to the processor’s meters', () => {
  it('is a scheduled job of a service configured with a processor', () => {
    expect(jobDefinitions(services.container).find((job) => job.queue === REPORT_USAGE_QUEUE)).toMatchObject({ schedule: '* * * * *', retryLimit: 5 });
    expect(services.container.usageReporter).toBeInstanceOf(UsageReporter);
  });

  it('reports a deployment’s N simulated seconds as N once, across a crash mid-run and concurrent runs', async () => {
    // 1 777 s in three intervals: 600 + 600 + 577.
    const { owner, customerId } = await meteredOrganization([600, 1200, 1777]);
    if (!customerId) throw new Error('no customer');

    // A run refused after the processor accepted two events: those two are marked, the third is not.
    await expect(new UsageReporter(services.db, refusingAfter(2)).run(services.log)).rejects.toThrow(/refused/);
    expect(await unreportedIntervals(owner)).toBe(1);
    // A worker killed after the processor accepted everything, before its marking transaction committed:
    // the rows are as they were before the run.
    const reporter = services.container.usageReporter as UsageReporter;
    await reporter.run(services.log);
    await services.db('gpu_usage_intervals').where({ organization_id: organizationOf(owner) }).update({ reported_at: null, report_id: null });
    expect(await unreportedIntervals(owner)).toBe(3);

    // Two runs at once (a retry and the next schedule) re-send under the same identifiers.
    await Promise.all([reporter.run(services.log), reporter.run(services.log)]);
    expect(await unreportedIntervals(owner)).toBe(0);
    expect(await reporter.run(services.log)).toEqual({ gpu_instance_seconds: 0, hosted_tokens: 0 });
    await expectMeterTotal(customerId, 1777);
    expect(await services.db('gpu_usage_intervals').where({ organization_id: organizationOf(owner) }).pluck('report_id')).toEqual(
      expect.arrayContaining([expect.stringMatching(/^gpu_usage_interval_\d+$/)]),
    );
  });

  it('keeps an open anomaly while the processor refuses reports, and resolves it once one is accepted', async () => {
    const { owner, customerId } = await meteredOrganization([300]);
    if (!customerId) throw new Error('no customer');
    const openAnomalies = async () => (await usageSummary(services.db, organizationOf(owner))).open_anomalies;

    await expect(new UsageReporter(services.db, failing).run(services.log)).rejects.toThrow(/refused/);
    await expect(new UsageReporter(services.db, failing).run(services.log)).rejects.toThrow(/refused/);
    expect(await openAnomalies()).toBe(1);
    expect(await unreportedIntervals(owner)).toBe(1);

    await new UsageReporter(services.db, processor).run(services.log);
    expect(await openAnomalies()).toBe(0);
    expect(await unreportedIntervals(owner)).toBe(0);
    await expectMeterTotal(customerId, 300);
  });

  it('lets the usage of an organization without a processor customer wait, without an anomaly', async () => {
    const { owner } = await meteredOrganization([120], false);
    await new UsageReporter(services.db, processor).run(services.log);
    expect(await unreportedIntervals(owner)).toBe(1);
    expect((await usageSummary(services.db, organizationOf(owner))).open_anomalies).toBe(0);
  });

  it('reports hosted-model tokens once, and leaves tokens of a deployment to its GPU seconds', async () => {
    const { owner, customerId } = await meteredOrganization([]);
    if (!customerId) throw new Error('no customer');
    const organization_id = organizationOf(owner);
    const deploymentId = (await services.db('deployments').where({ organization_id }).first('id')).id;
    await services.db('usage_records').insert([
      { request_id: 'hosted-1', organization_id, route: 'POST /v1/chat/completions', model: 'qwen2.5-instruct', unit: 'token', quantity: 700, created_at: after(60) },
      { request_id: 'hosted-2', organization_id, route: 'POST /v1/chat/completions', model: 'qwen2.5-instruct', unit: 'token', quantity: 45, created_at: after(90) },
      { request_id: 'own', organization_id, deployment_id: deploymentId, route: 'POST /v1/chat/completions', model: 'qwen2.5-instruct', unit: 'token', quantity: 9000, created_at: after(90) },
    ]);
    const reporter = services.container.usageReporter as UsageReporter;
    await Promise.all([reporter.run(services.log), reporter.run(services.log)]);
    await reporter.run(services.log);
    const window = { meterId: tokenMeter.meterId, customerId, start: new Date(T0.getTime() - 3_600_000), end: new Date(T0.getTime() + 3 * 3_600_000) };
    await waitUntil(async () => (await processor.meterTotal(window)) === 745, 'the hosted tokens total to be 745', onEmulator ? 5_000 : 120_000);
    expect(await services.db('usage_records').where({ organization_id }).whereNotNull('reported_at').orderBy('request_id').pluck('request_id')).toEqual(['hosted-1', 'hosted-2']);
  });
});
