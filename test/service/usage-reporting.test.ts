import { pino } from 'pino';
import type Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionPrincipal } from '../../src/principal.ts';
import { StripePaymentProcessor } from '../../src/adapters/stripe.ts';
import { PaymentProcessorError, type PaymentProcessor, type ProcessorMeterPrice } from '../../src/billing/payment-processor.ts';
import { installationId } from '../../src/billing/installation.ts';
import { METER_PRICES, REPORT_USAGE_QUEUE, UsageReporter } from '../../src/billing/usage-reporting.ts';
import { UsageReconciler } from '../../src/billing/usage-reconciliation.ts';
import type { UsageDifference } from '../../src/billing/usage-differences.repository.ts';
import { jobDefinitions } from '../../src/container.ts';
import { usageSummary } from '../../src/metering/usage-summary.ts';
import { upsertPrice } from '../../src/metering/metering.repository.ts';
import { periodSpentCents } from '../../src/billing/deployment-guard.ts';
import { toCents } from '../../src/metering/money.ts';
import { parseServiceKey } from '../../src/metering/service-keys.ts';
import { waitUntil } from '../helpers/net.ts';
import { runningDeployment, startServices, type Services } from '../helpers/services.ts';
import { expectSettledTotal, onEmulator, startStripeTarget, type StripeTarget } from '../helpers/stripe.ts';
import { runningSince } from '../helpers/time-travel.ts';

/**
 * Reporting usage to the processor's meters through the real `stripe` SDK (the Stripe emulator, or
 * Stripe test mode with `STRIPE_SECRET_KEY=sk_test_… make test-billing`): each meter counts the usage's amount, priced per
 * service key, in millionths of a dollar, once, whatever refusals, crashes and concurrent runs
 * happen, and without losing a fraction of a millionth over many small reports.
 */
let services: Services;
let target: StripeTarget;
let processor: StripePaymentProcessor;
/** The services' settings of the Stripe target (a second installation uses the same). */
let stripe: Record<string, string>;
let gpuMeter: ProcessorMeterPrice;
let tokenMeter: ProcessorMeterPrice;
const run = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
/** The GPU price of every deployment here: 1 777 s cost exactly $0.495783. */
const GPU_PRICE = '0.000279';

beforeAll(async () => {
  target = await startStripeTarget();
  stripe = {
    STRIPE_SECRET_KEY: target.secretKey,
    STRIPE_PUBLISHABLE_KEY: target.emulator?.publishableKey ?? 'pk_test_unused',
    STRIPE_WEBHOOK_SECRET: 'whsec_test',
    ...(target.apiUrl ? { STRIPE_API_URL: target.apiUrl } : {}),
  };
  // Payment setup is not under test here: enforcement off, so deployments are created without it.
  services = await startServices({ MAX_ACTIVE_RESOURCES: '50', BILLING_ENFORCEMENT: 'false', ...stripe }, { cluster: { modelLoadMs: 20 } });
  processor = new StripePaymentProcessor({ secretKey: target.secretKey, webhookSecret: 'whsec_test', apiUrl: target.apiUrl });
  const meters = await processor.ensureMeterPrices(METER_PRICES);
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

/**
 * An organization with a processor customer subscribed to the meters (`customer`: without the
 * subscription; `none`: no customer) and a deployment running since T0 at GPU_PRICE a second, its
 * seconds closed at the given offsets.
 */
async function meteredOrganization(
  closedAt: number[],
  setup: 'subscribed' | 'customer' | 'none' = 'subscribed',
): Promise<{ owner: SessionPrincipal; deploymentId: string; customerId: string | undefined }> {
  const owner = await services.owner();
  const deploymentId = await runningDeployment(services, owner);
  await runningSince(services, deploymentId, T0);
  for (const seconds of closedAt) await services.container.gpuMeter.accrue(deploymentId, after(seconds));
  const serviceKeys = services.db('gpu_usage_intervals').where({ deployment_id: deploymentId }).distinct('service_key');
  await services.db('prices').whereIn('service_key', serviceKeys).update({ unit_amount_decimal: GPU_PRICE });
  if (setup === 'none') return { owner, deploymentId, customerId: undefined };
  const customer = await processor.ensureCustomer({ key: `org-${run}-${organizationOf(owner)}`, organizationId: organizationOf(owner), name: 'Org' });
  await services.db('billing_accounts').where({ organization_id: organizationOf(owner) }).update({ processor_customer_id: customer.id });
  if (setup === 'subscribed') await subscribe(owner, customer.id);
  return { owner, deploymentId, customerId: customer.id };
}

/** Subscribes the organization's customer to the meters' prices with a test card, and records it as billing does. */
async function subscribe(owner: SessionPrincipal, customerId: string, side: Services = services): Promise<void> {
  const card = await target.stripe.paymentMethods.attach('pm_card_visa', { customer: customerId });
  await processor.setDefaultPaymentMethod(customerId, card.id);
  const subscription = await processor.createSubscription({
    key: `subscription-${run}-${organizationOf(owner)}-${customerId}`,
    customerId,
    priceIds: [gpuMeter.priceId, tokenMeter.priceId],
    defaultPaymentMethodId: card.id,
    metadata: {},
  });
  await side.db('billing_accounts').where({ organization_id: organizationOf(owner) }).update({ processor_subscription_id: subscription.id, subscription_status: subscription.status });
}

/** The meter's total for the customer around T0, in millionths of a dollar. */
const meterTotal = (meter: ProcessorMeterPrice, customerId: string) =>
  processor.meterTotal({ meterId: meter.meterId, customerId, start: new Date(T0.getTime() - 3_600_000), end: new Date(T0.getTime() + 3 * 3_600_000) });

async function expectMeterTotal(meter: ProcessorMeterPrice, customerId: string, micros: number): Promise<void> {
  await expectSettledTotal(() => meterTotal(meter, customerId), micros, 'the meter total');
}

async function unreportedIntervals(owner: SessionPrincipal): Promise<number> {
  const [row] = await services.db('gpu_usage_intervals').where({ organization_id: organizationOf(owner) }).whereNull('reported_at').count({ n: '*' });
  return Number(row?.n);
}

/** The processor, refusing every meter event. */
const failing: PaymentProcessor = Object.assign(Object.create(null) as PaymentProcessor, {
  ensureMeterPrices: (input: Parameters<PaymentProcessor['ensureMeterPrices']>[0]) => processor.ensureMeterPrices(input),
  async reportMeterEvent() {
    throw new PaymentProcessorError('processor unavailable', { status: 503 });
  },
});

describe('reporting usage to the processor’s meters', () => {
  it('is a scheduled job of a service configured with a processor', () => {
    expect(jobDefinitions(services.container).find((job) => job.queue === REPORT_USAGE_QUEUE)).toMatchObject({ schedule: '* * * * *', retryLimit: 5 });
    expect(services.container.usageReporter).toBeInstanceOf(UsageReporter);
  });

  it('reports N simulated GPU seconds as their amount at the service key’s price, once, across a refusal, a crash and concurrent runs', async () => {
    // 1 777 s in three intervals (600 + 600 + 577) at $0.000279: $0.495783.
    const { owner, deploymentId, customerId } = await meteredOrganization([600, 1200, 1777]);
    if (!customerId) throw new Error('no customer');
    const organization_id = organizationOf(owner);

    // A refused run claims the intervals into one report and sends nothing.
    await expect(new UsageReporter(services.db, failing).run(services.log)).rejects.toThrow(/refused/);
    const [claimed] = await services.db('usage_reports').where({ organization_id, meter: 'gpu_instance_seconds' });
    expect(claimed).toMatchObject({ quantity: '1777', value: '495783', reported_at: null });
    expect(await services.db('gpu_usage_intervals').where({ organization_id }).distinct().pluck('usage_report_id')).toEqual([claimed.id]);
    expect(await unreportedIntervals(owner)).toBe(3);

    // Sent; then a worker killed after the processor accepted, before its marking committed: as before.
    const reporter = services.container.usageReporter as UsageReporter;
    await reporter.run(services.log);
    expect(await unreportedIntervals(owner)).toBe(0);
    await services.db('usage_reports').where({ id: claimed.id }).update({ reported_at: null });
    await services.db('gpu_usage_intervals').where({ organization_id }).update({ reported_at: null });

    // Two runs at once (a retry and the next schedule) re-send under the same identifier: Stripe
    // refuses it as a duplicate (it has the event), which counts as sent, with no anomaly.
    await Promise.all([reporter.run(services.log), reporter.run(services.log)]);
    expect(await unreportedIntervals(owner)).toBe(0);
    expect((await usageSummary(services.db, organization_id)).open_anomalies).toBe(0);
    expect(await reporter.run(services.log)).toEqual({ gpu_instance_seconds: 0, hosted_tokens: 0 });
    await expectMeterTotal(gpuMeter, customerId, 495_783);

    // 23 s more: the next report carries only them ($0.502200 in all), and the summary agrees.
    await services.container.gpuMeter.accrue(deploymentId, after(1800));
    await reporter.run(services.log);
    await expectMeterTotal(gpuMeter, customerId, 502_200);
    expect(await services.db('usage_reports').where({ organization_id }).orderBy('id').pluck('value')).toEqual(['495783', '6417']);
    const summary = await usageSummary(services.db, organization_id, after(1800));
    expect(summary.usage_totals).toEqual([expect.objectContaining({ meter: 'gpu_instance_seconds', total_quantity: '1800', unit_amount_decimal: GPU_PRICE, estimated_amount: '0.50' })]);
  });

  it('loses no fraction of a millionth of a dollar over many small reports', async () => {
    const { owner, customerId } = await meteredOrganization([]);
    if (!customerId) throw new Error('no customer');
    const organization_id = organizationOf(owner);
    // $0.40 a million tokens: 3 tokens are 1.2 millionths of a dollar, reported once a run.
    await services.db('prices').insert({ provider: 'platform', region: '', resource_kind: 'hosted_model', instance_type: `carry-${run}`, gpu_type: '', gpu_count: '', unit_amount_decimal: '0.0000004' });
    const reporter = services.container.usageReporter as UsageReporter;
    for (let i = 0; i < 5; i++) {
      await services.db('usage_records').insert({ request_id: `carry-${i}`, organization_id, route: 'POST /v1/chat/completions', model: `carry-${run}`, unit: 'token', quantity: 3, created_at: after(60 + i) });
      await reporter.run(services.log);
    }
    expect(await services.db('usage_reports').where({ organization_id, meter: 'hosted_tokens' }).orderBy('id').pluck('value')).toEqual(['1', '1', '1', '1', '2']);
    await expectMeterTotal(tokenMeter, customerId, 6);
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
    // 300 s at $0.000279.
    await expectMeterTotal(gpuMeter, customerId, 83_700);
  });

  it('lets the usage of an organization without a processor customer wait, unclaimed and without an anomaly', async () => {
    const { owner } = await meteredOrganization([120], 'none');
    await new UsageReporter(services.db, processor).run(services.log);
    expect(await unreportedIntervals(owner)).toBe(1);
    expect(await services.db('usage_reports').where({ organization_id: organizationOf(owner) })).toEqual([]);
    expect((await usageSummary(services.db, organizationOf(owner))).open_anomalies).toBe(0);
  });

  it('holds the usage of an organization whose customer has no live subscription, shows it as an anomaly, and reports it once subscribed', async () => {
    const { owner, customerId } = await meteredOrganization([240], 'customer');
    if (!customerId) throw new Error('no customer');
    const reporter = services.container.usageReporter as UsageReporter;
    await reporter.run(services.log);
    await reporter.run(services.log);
    expect(await unreportedIntervals(owner)).toBe(1);
    expect(await services.db('usage_reports').where({ organization_id: organizationOf(owner) })).toEqual([]);
    const anomalies = await services.db('usage_anomalies').where({ organization_id: organizationOf(owner) });
    expect(anomalies).toEqual([expect.objectContaining({ kind: 'no_subscription', meter: 'gpu_instance_seconds', resolved_at: null })]);
    expect((await usageSummary(services.db, organizationOf(owner))).open_anomalies).toBe(1);
    await expectMeterTotal(gpuMeter, customerId, 0);

    await subscribe(owner, customerId);
    await reporter.run(services.log);
    expect(await unreportedIntervals(owner)).toBe(0);
    expect((await usageSummary(services.db, organizationOf(owner))).open_anomalies).toBe(0);
    // 240 s at $0.000279.
    await expectMeterTotal(gpuMeter, customerId, 66_960);
  });

  it('reports hosted-model tokens at the model’s price once, and leaves tokens of a deployment to its GPU seconds', async () => {
    const { owner, deploymentId, customerId } = await meteredOrganization([]);
    if (!customerId) throw new Error('no customer');
    const organization_id = organizationOf(owner);
    await services.db('usage_records').insert([
      { request_id: 'hosted-1', organization_id, route: 'POST /v1/chat/completions', model: 'qwen2.5-instruct', unit: 'token', quantity: 700, created_at: after(60) },
      { request_id: 'hosted-2', organization_id, route: 'POST /v1/chat/completions', model: 'qwen2.5-instruct', unit: 'token', quantity: 45, created_at: after(90) },
      { request_id: 'own', organization_id, deployment_id: deploymentId, route: 'POST /v1/chat/completions', model: 'qwen2.5-instruct', unit: 'token', quantity: 9000, created_at: after(90) },
    ]);
    const reporter = services.container.usageReporter as UsageReporter;
    await Promise.all([reporter.run(services.log), reporter.run(services.log)]);
    await reporter.run(services.log);
    const { rows } = await services.db.raw<{ rows: [{ micros: string }] }>(
      "select floor(745 * unit_amount_decimal * 1000000)::text as micros from prices where resource_kind = 'hosted_model' and instance_type = 'qwen2.5-instruct'",
    );
    expect(Number(rows[0].micros)).toBeGreaterThan(0);
    await expectMeterTotal(tokenMeter, customerId, Number(rows[0].micros));
    expect(await services.db('usage_records').where({ organization_id }).whereNotNull('reported_at').orderBy('request_id').pluck('request_id')).toEqual(['hosted-1', 'hosted-2']);
  });
});

describe('one rounding rule', () => {
  it('estimates what the invoice charges to the cent: one line per meter rounded once, not each service rounded and added up', async () => {
    const { owner, customerId, deploymentId } = await meteredOrganization([]);
    if (!customerId) throw new Error('no customer');
    const organization_id = organizationOf(owner);
    const subscription = await target.stripe.subscriptions.retrieve((await services.db('billing_accounts').where({ organization_id }).first()).processor_subscription_id);
    const item = subscription.items.data[0] as { current_period_start: number; current_period_end: number };
    const periodStart = new Date(item.current_period_start * 1000);
    await services.db('billing_accounts').where({ organization_id }).update({ current_period_start: periodStart, current_period_end: new Date(item.current_period_end * 1000) });
    // Only hosted tokens in the period: the deployment's GPU seconds closed at its start (else a
    // whole second passed since it, on a loaded machine, adds a GPU line of its own).
    await services.db('deployment_replicas').where({ deployment_id: deploymentId }).update({ running_until: periodStart, accrued_until: periodStart });
    // Three hosted models of $0.004, $0.0035 and $0.0045 in the period: each rounds to $0.00 on its
    // own, their line ($0.012) to $0.01.
    const usage = [
      ['a', '0.0000004', 10_000],
      ['b', '0.0000005', 7_000],
      ['c', '0.0000009', 5_000],
    ] as const;
    for (const [name, price, tokens] of usage) {
      await upsertPrice(services.db, parseServiceKey(`platform::hosted_model:awkward-${name}-${run}::`), price);
      await services.db('usage_records').insert({ request_id: `awkward-${name}`, organization_id, route: 'POST /v1/chat/completions', model: `awkward-${name}-${run}`, unit: 'token', quantity: tokens, created_at: new Date() });
    }
    const summary = await usageSummary(services.db, organization_id);
    expect(summary.usage_totals.map((total) => total.estimated_amount)).toEqual(['0.00', '0.00', '0.00']);
    expect(summary.meter_totals).toEqual([{ meter: 'hosted_tokens', estimated_amount: '0.01', estimated_amount_currency: 'usd' }]);
    expect(summary.estimated_total).toBe('0.01');
    expect(periodSpentCents(summary)).toBe(1n);

    await (services.container.usageReporter as UsageReporter).run(services.log);
    await expectMeterTotal(tokenMeter, customerId, 12_000);
    // Stripe's preview follows its meter's aggregation, which lags on Stripe itself.
    const tokenLine = (preview: Stripe.Invoice) => preview.lines.data.find((line) => line.pricing?.price_details?.price === tokenMeter.priceId);
    let preview: Stripe.Invoice | undefined;
    await waitUntil(async () => {
      preview = await target.stripe.invoices.createPreview({ subscription: subscription.id });
      return tokenLine(preview)?.amount === 1;
    }, 'the preview’s token line to charge 1 cent', onEmulator ? 5_000 : 120_000);
    expect(BigInt(preview?.total ?? -1)).toBe(toCents(summary.estimated_total));
  });
});

describe('period boundaries', () => {
  it.runIf(onEmulator)('puts every second on the invoice of its period: usage across the bound is cut there, and reported within the hour before the closed period’s invoice is finalized', async () => {
    // A subscription on a test clock whose first period ended an hour ago (B), a deployment that ran
    // from 10 minutes before B to 5 minutes after it.
    const bound = new Date(T0.getTime() + 3_600_000);
    // A month before a 29th to 31st may not exist (its start would roll into the next month): a few days earlier then.
    if (bound.getUTCDate() > 28) bound.setUTCDate(bound.getUTCDate() - 4);
    const start = new Date(bound);
    start.setUTCMonth(start.getUTCMonth() - 1);
    const seconds = (date: Date) => Math.floor(date.getTime() / 1000);
    const clock = await target.stripe.testHelpers.testClocks.create({ frozen_time: seconds(start) });
    const owner = await services.owner();
    const organization_id = organizationOf(owner);
    const customer = await target.stripe.customers.create({ name: `boundary-${run}`, test_clock: clock.id, metadata: { organization_id: String(organization_id) } });
    await services.db('billing_accounts').where({ organization_id }).update({ processor_customer_id: customer.id });
    await subscribe(owner, customer.id);
    const subscriptionId = (await services.db('billing_accounts').where({ organization_id }).first()).processor_subscription_id as string;
    expect((await target.stripe.subscriptions.retrieve(subscriptionId)).items.data[0]?.current_period_end).toBe(seconds(bound));
    const advance = async (to: Date) => {
      await target.stripe.testHelpers.testClocks.advance(clock.id, { frozen_time: seconds(to) });
      await waitUntil(async () => (await target.stripe.testHelpers.testClocks.retrieve(clock.id)).status === 'ready', 'the test clock to be ready', 5_000);
    };
    // Half an hour after the bound: the closed period's invoice is a draft; the account has the new period.
    await advance(new Date(bound.getTime() + 1_800_000));
    const renewed = (await target.stripe.subscriptions.retrieve(subscriptionId)).items.data[0] as { current_period_start: number; current_period_end: number };
    await services.db('billing_accounts').where({ organization_id }).update({ current_period_start: new Date(renewed.current_period_start * 1000), current_period_end: new Date(renewed.current_period_end * 1000) });
    const [closing] = (await target.stripe.invoices.list({ customer: customer.id, status: 'draft' })).data;
    expect(closing).toMatchObject({ billing_reason: 'subscription_cycle', period_end: seconds(bound) });

    const deploymentId = await runningDeployment(services, owner);
    await runningSince(services, deploymentId, new Date(bound.getTime() - 600_000));
    const serviceKeys = services.db('deployment_gpu_services').where({ deployment_id: deploymentId }).select('service_key');
    await services.db('prices').whereIn('service_key', serviceKeys).update({ unit_amount_decimal: GPU_PRICE });
    await services.container.gpuMeter.accrue(deploymentId, new Date(bound.getTime() + 300_000));
    const intervals = await services.db('gpu_usage_intervals').where({ deployment_id: deploymentId }).orderBy('started_at').select('started_at', 'ended_at');
    expect(intervals.map((row) => [row.started_at.getTime() - bound.getTime(), row.ended_at.getTime() - bound.getTime()])).toEqual([
      [-600_000, 0],
      [0, 300_000],
    ]);

    await (services.container.usageReporter as UsageReporter).run(services.log);
    const reports = await services.db('usage_reports').where({ organization_id }).orderBy('id').select('usage_at', 'value');
    // 600 s and 300 s at $0.000279: one report on each side of the bound, each stamped inside its period.
    expect(reports.map((row) => [row.usage_at < bound, row.value])).toEqual([
      [true, '167400'],
      [false, '83700'],
    ]);
    // An hour after the bound the closed period's invoice is finalized with its 600 s; the 300 s are on the next.
    await advance(new Date(bound.getTime() + 3_700_000));
    const invoice = await target.stripe.invoices.retrieve(closing?.id ?? '');
    const gpuLine = (of: Stripe.Invoice) => of.lines.data.find((line) => line.pricing?.price_details?.price === gpuMeter.priceId);
    expect(invoice.status).toBe('paid');
    expect(gpuLine(invoice)).toMatchObject({ quantity: 167_400, amount: 17 });
    const next = await target.stripe.invoices.createPreview({ subscription: subscriptionId });
    expect(gpuLine(next)).toMatchObject({ quantity: 83_700, amount: 8 });

    // Differences in the invoiced period (planted as reconciliation records them): what Stripe
    // missed goes on the next invoice as an item, what it counted twice is credited on that invoice.
    await services.db('invoices').insert({
      processor_invoice_id: invoice.id, billing_account_id: (await services.db('billing_accounts').where({ organization_id }).first()).id, status: invoice.status, collection_method: 'charge_automatically',
      amount_due: invoice.amount_due, amount_paid: invoice.amount_paid, currency: 'usd', period_start: new Date(invoice.period_start * 1000), period_end: new Date(invoice.period_end * 1000), created: new Date(invoice.created * 1000),
    });
    const day = new Date(bound.getTime() - 600_000).toISOString().slice(0, 10);
    const [missed, doubled] = await services.db('usage_differences')
      .insert([
        { organization_id, customer_id: customer.id, meter: 'gpu_instance_seconds', day, reported: 267_400, at_processor: 167_400 },
        { organization_id, customer_id: customer.id, meter: 'hosted_tokens', day, reported: 0, at_processor: 50_000 },
      ])
      .returning('id');
    const reconciler = new UsageReconciler(services.db, processor);
    const clockNow = new Date(bound.getTime() + 3_700_000);
    expect(await reconciler.correct(missed.id, clockNow)).toMatchObject({ kind: 'invoice_item', amountCents: 10n });
    expect(await reconciler.correct(doubled.id, clockNow)).toMatchObject({ kind: 'credit_note', amountCents: 5n });
    const [credit] = (await target.stripe.creditNotes.list({ invoice: invoice.id })).data;
    expect(credit).toMatchObject({ amount: 5, type: 'post_payment', status: 'issued' });
    expect(((await target.stripe.customers.retrieve(customer.id)) as Stripe.Customer).balance).toBe(-5);
    const withItem = await target.stripe.invoices.createPreview({ subscription: subscriptionId });
    expect(withItem.lines.data.map((line) => line.amount).sort((a, b) => a - b)).toEqual([0, 8, 10]);
    expect(await reconciler.open(organization_id)).toEqual([]);

    // A real surplus on the closed period's day, found by the daily run, credited, and not found again.
    const lastSecond = new Date(bound.getTime() - 1000);
    await target.stripe.billing.meterEvents.create({ event_name: 'gpu_instance_seconds', timestamp: seconds(lastSecond), payload: { stripe_customer_id: customer.id, value: '20000' } });
    const nextDay = new Date(bound.getTime() + 26 * 3_600_000);
    const silent = pino({ level: 'silent' });
    await reconciler.run(silent, nextDay);
    const [surplus] = await reconciler.open(organization_id);
    // What was reported that day (UTC): the closed period's 600 s, and the next one's 300 s unless midnight came between.
    const { rows } = await services.db.raw<{ rows: [{ value: string }] }>(
      "select sum(value)::text as value from usage_reports where organization_id = ? and date_trunc('day', usage_at, 'UTC') = date_trunc('day', ?::timestamptz, 'UTC')",
      [organization_id, lastSecond],
    );
    expect(surplus).toMatchObject({ meter: 'gpu_instance_seconds', day: lastSecond.toISOString().slice(0, 10), reported: rows[0].value, at_processor: String(Number(rows[0].value) + 20_000) });
    expect(await reconciler.correct(surplus?.id ?? '', clockNow)).toMatchObject({ kind: 'credit_note', amountCents: 2n });
    await reconciler.run(silent, nextDay);
    expect(await reconciler.open(organization_id)).toEqual([]);
  });

  it('alerts when usage of an ended period is still not at the processor half an hour after its end', async () => {
    const { owner } = await meteredOrganization([300]);
    const organization_id = organizationOf(owner);
    // The account's period began 10 minutes after T0 (over an hour and a half ago): the usage, before it, belongs to the closed period.
    await services.db('billing_accounts').where({ organization_id }).update({ current_period_start: after(600), current_period_end: after(30 * 86_400) });
    const lines: Array<Record<string, unknown>> = [];
    const log = pino({ level: 'error' }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    await expect(new UsageReporter(services.db, failing).run(log)).rejects.toThrow(/refused/);
    expect(lines.filter((line) => line.alert === 'usage_late_for_invoice' && line.organization_id === organization_id)).toEqual([
      expect.objectContaining({ meter: 'gpu_instance_seconds', amount: expect.stringMatching(/^0\.0837/) }),
    ]);
    await (services.container.usageReporter as UsageReporter).run(log);
    lines.length = 0;
    await (services.container.usageReporter as UsageReporter).run(log);
    expect(lines.filter((line) => line.alert === 'usage_late_for_invoice' && line.organization_id === organization_id)).toEqual([]);
  });
});

describe('reconciliation with the processor', () => {
  it('finds a planted difference each way, corrects what the processor misses with a meter event, and leaves a surplus on an invoice not finalized to the operator', async () => {
    const reconciler = new UsageReconciler(services.db, processor);
    const lost = await meteredOrganization([300]);
    const doubled = await meteredOrganization([600]);
    await (services.container.usageReporter as UsageReporter).run(services.log);
    // Planted: a report marked counted that never reached the processor, and an event the processor counted twice.
    const organization_id = organizationOf(lost.owner);
    await services.db('usage_reports').insert({
      organization_id, meter: 'gpu_instance_seconds', customer_id: lost.customerId, quantity: 10, amount: '0.00279', cumulative_amount: '0.08649',
      cumulative_micros: 86_490, value: 2790, usage_at: after(299), identifier: `planted-${run}`, reported_at: new Date(), first_sent_at: new Date(),
    });
    await target.stripe.billing.meterEvents.create({ event_name: 'gpu_instance_seconds', timestamp: Math.floor(after(599).getTime() / 1000), payload: { stripe_customer_id: doubled.customerId ?? '', value: '50000' } });
    // A day later (the days of the usage have ended over an hour before), as the daily job runs. Each
    // organization's usage is on the day (UTC) of its report, stamped with its interval's last second.
    const tomorrow = new Date(T0.getTime() + 26 * 3_600_000);
    const dayOf = (date: Date) => date.toISOString().slice(0, 10);
    const silent = pino({ level: 'silent' });
    await waitUntil(async () => {
      await reconciler.run(silent, tomorrow);
      return (await reconciler.open(organizationOf(doubled.owner))).length === 1;
    }, 'the surplus to be seen', onEmulator ? 5_000 : 120_000);
    const differenceOf = async (owner: SessionPrincipal) => (await reconciler.open(organizationOf(owner)))[0];
    expect(await differenceOf(lost.owner)).toMatchObject({ customer_id: lost.customerId, meter: 'gpu_instance_seconds', day: dayOf(after(299)), reported: '86490', at_processor: '83700' });
    expect(await differenceOf(doubled.owner)).toMatchObject({ customer_id: doubled.customerId, day: dayOf(after(599)), reported: '167400', at_processor: '217400' });

    // The missing 2790 are sent inside that day (its period is not invoiced yet); the surplus needs a
    // credit note on the period's invoice, which is not finalized yet: the operator settles it.
    const missing = (await differenceOf(lost.owner)) as UsageDifference;
    expect(await reconciler.correct(missing.id)).toMatchObject({ kind: 'meter_event', value: 2790n });
    const surplus = (await differenceOf(doubled.owner)) as UsageDifference;
    await expect(reconciler.correct(surplus.id)).rejects.toThrow(/is not finalized yet \(a credit note needs a finalized invoice\)/);
    await reconciler.resolve(surplus.id, 'credit note CN-0001');

    await waitUntil(async () => {
      await reconciler.run(silent, tomorrow);
      return (await reconciler.open(organizationOf(lost.owner))).length === 0;
    }, 'the correction to be counted', onEmulator ? 5_000 : 120_000);
    // The settled surplus is not opened again; the corrected day matches.
    expect(await reconciler.open(organizationOf(doubled.owner))).toEqual([]);
    await expectMeterTotal(gpuMeter, lost.customerId as string, 86_490);
  });
});

describe('reports unique beyond one database', () => {
  it('sends every identifier and idempotency key under the installation’s random id: two installations on one Stripe account never collide', async () => {
    const other = await startServices({ BILLING_ENFORCEMENT: 'false', ...stripe });
    try {
      const [mine, theirs] = [services, other];
      const installations = await Promise.all([mine, theirs].map((side) => installationId(side.db)));
      expect(installations[0]).not.toBe(installations[1]);
      // Each database's first organizations have the same ids; each gets a customer of its own.
      const owners = await Promise.all([mine, theirs].map((side) => side.owner()));
      const customers: string[] = [];
      for (const [i, side] of [mine, theirs].entries()) {
        const owner = owners[i] as SessionPrincipal;
        await side.container.billing.checkoutSetupSession(owner, 'payment_method_setup', undefined);
        const customerId = (await side.db('billing_accounts').where({ organization_id: organizationOf(owner) }).first()).processor_customer_id as string;
        await subscribe(owner, customerId, side);
        customers.push(customerId);
      }
      expect(customers[0]).not.toBe(customers[1]);
      // Both report hosted tokens: identifiers differ and each meter counts its own.
      for (const [i, side] of [mine, theirs].entries()) {
        const organization_id = organizationOf(owners[i] as SessionPrincipal);
        await side.db('prices').insert({ provider: 'platform', region: '', resource_kind: 'hosted_model', instance_type: `two-${run}`, gpu_type: '', gpu_count: '', unit_amount_decimal: '0.001' }).onConflict().ignore();
        await side.db('usage_records').insert({ request_id: `two-${i}`, organization_id, route: 'POST /v1/chat/completions', model: `two-${run}`, unit: 'token', quantity: 5 + i, created_at: after(60) });
        await new UsageReporter(side.db, processor).run(side.log);
      }
      const identifiers = await Promise.all([mine, theirs].map(async (side, i) => (await side.db('usage_reports').where({ organization_id: organizationOf(owners[i] as SessionPrincipal) }).first()).identifier as string));
      expect(identifiers[0]?.startsWith(`${installations[0]}-`)).toBe(true);
      expect(identifiers[1]?.startsWith(`${installations[1]}-`)).toBe(true);
      await expectMeterTotal(tokenMeter, customers[0] as string, 5000);
      await expectMeterTotal(tokenMeter, customers[1] as string, 6000);
    } finally {
      await other.close();
    }
  });
});

// Last in the file: it moves the emulator's clock a day on.
describe.runIf(onEmulator)('a report first sent more than 23 hours ago (emulator: Stripe’s uniqueness window passes)', () => {
  it('is not sent again when the meter’s summary shows Stripe has it, and is sent when it does not: counted once either way', async () => {
    const reporter = services.container.usageReporter as UsageReporter;
    // `counted`: accepted, then its worker died before marking it. `lost`: stamped as sent, then the
    // worker died before the request left (the refusing processor never counts it).
    const counted = await meteredOrganization([300]);
    await reporter.run(services.log);
    const lost = await meteredOrganization([600]);
    await expect(new UsageReporter(services.db, failing).run(services.log)).rejects.toThrow(/refused/);
    for (const { owner } of [counted, lost]) {
      const organization_id = organizationOf(owner);
      await services.db('usage_reports').where({ organization_id }).update({ reported_at: null, first_sent_at: services.db.raw("now() - interval '25 hours'") });
      await services.db('gpu_usage_intervals').where({ organization_id }).update({ reported_at: null });
      await services.db('usage_anomalies').where({ organization_id }).delete();
    }
    // A day later at Stripe: the identifiers it accepted would be accepted again.
    const advanced = await fetch(`${target.apiUrl}/_emulator/advance_time`, {
      method: 'POST',
      headers: { authorization: `Bearer ${target.secretKey}`, 'content-type': 'application/x-www-form-urlencoded' },
      body: `seconds=${25 * 3600}`,
    });
    expect(advanced.status).toBe(200);

    await reporter.run(services.log);
    for (const { owner } of [counted, lost]) {
      expect(await unreportedIntervals(owner)).toBe(0);
      expect((await usageSummary(services.db, organizationOf(owner))).open_anomalies).toBe(0);
    }
    // 300 s and 600 s at $0.000279.
    await expectMeterTotal(gpuMeter, counted.customerId as string, 83_700);
    await expectMeterTotal(gpuMeter, lost.customerId as string, 167_400);
  });
});
