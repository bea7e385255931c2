import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import type { BillingAccountRow } from '../db/models/billing-accounts.ts';
import { countOpenAnomalies, currentSecond, findAccountPeriod, usageTotals, type Period, type UsageTotalRow } from './metering.repository.ts';
import { formatCents, roundedSumCents, toCents } from './money.ts';

export type UsageSummary = components['schemas']['UsageSummary'];
type UsageTotal = components['schemas']['UsageTotal'];
type MeterTotal = components['schemas']['MeterTotal'];

/**
 * The current billing period: the subscription's when the account has one that contains `now`,
 * otherwise the calendar month (UTC) of `now`.
 */
export function currentPeriod(account: Pick<BillingAccountRow, 'current_period_start' | 'current_period_end'>, now: Date): Period {
  const { current_period_start: start, current_period_end: end } = account;
  if (start && end && start <= now && now < end) return { start, end };
  return {
    start: new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)),
    end: new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1)),
  };
}

/**
 * The organization's usage summary for the current period (the interface's Usage summary): per
 * service, its total, unit price and estimated amount, GPU seconds of running deployments counted up
 * to now (`at`, by default the database clock); per meter, the amount its invoice line will charge
 * (the exact sum of its services' amounts, rounded once, as Stripe rounds a line), and their total,
 * which the spending limit and its alerts compare; and the usage flagged for review and still open.
 */
export async function usageSummary(db: Knex, organizationId: number, at?: Date): Promise<UsageSummary> {
  const [account, now] = await Promise.all([findAccountPeriod(db, organizationId), at ?? currentSecond(db)]);
  if (!account) throw new Error(`organization ${organizationId} has no billing account`);
  const period = currentPeriod(account, now);
  const [usage, openAnomalies] = await Promise.all([periodUsage(db, organizationId, period, now, account.currency), countOpenAnomalies(db, organizationId, period)]);
  return {
    organization_id: organizationId,
    period_start: period.start.toISOString(),
    period_end: period.end.toISOString(),
    currency: account.currency,
    usage_totals: usage.services.map(toUsageTotal),
    meter_totals: usage.meterTotals,
    estimated_total: usage.estimatedTotal,
    estimated_total_currency: account.currency,
    open_anomalies: openAnomalies,
  };
}

/** A period's usage per priced service and its amounts as the invoice rounds them. */
export interface PeriodUsage {
  services: UsageTotalRow[];
  meterTotals: MeterTotal[];
  /** The sum of `meterTotals`, in the currency's major unit with two decimals. */
  estimatedTotal: string;
}

/**
 * The organization's usage in any period (GPU seconds of serving replicas counted up to `now`), per
 * service and per meter line: the one computation behind the usage summary and the usage export's
 * totals, so the two cannot disagree.
 */
export async function periodUsage(db: Knex, organizationId: number, period: Period, now: Date, currency: string): Promise<PeriodUsage> {
  const services = await usageTotals(db, organizationId, period, now);
  const meterTotals = meterLines(services, currency);
  return { services, meterTotals, estimatedTotal: formatCents(meterTotals.reduce((sum, line) => sum + toCents(line.estimated_amount), 0n)) };
}

/** One line per meter used, as the invoice will have it: its services' exact amounts summed, rounded once. */
function meterLines(totals: readonly UsageTotalRow[], currency: string): MeterTotal[] {
  const meters = [...new Set(totals.map((row) => row.meter))];
  return meters.map((meter) => ({
    meter,
    estimated_amount: formatCents(roundedSumCents(totals.filter((row) => row.meter === meter).map((row) => row.exact_amount))),
    estimated_amount_currency: currency,
  }));
}

function toUsageTotal(row: UsageTotalRow): UsageTotal {
  return {
    meter: row.meter,
    unit: row.unit,
    total_quantity: row.total_quantity,
    service_key: row.service_key,
    display_name: row.display_name,
    dimensions: {
      provider: row.provider,
      region: row.region,
      resource_kind: row.resource_kind,
      instance_type: row.instance_type,
      gpu_type: row.gpu_type,
      gpu_count: row.gpu_count,
    },
    unit_amount_decimal: row.unit_amount_decimal,
    unit_amount_currency: row.currency,
    estimated_amount: row.estimated_amount,
    estimated_amount_currency: row.currency,
  };
}
