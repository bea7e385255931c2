import type { components } from '../../generated/api.d.ts';
import type { EffectiveLimits } from '../principal.ts';

export type ApiKeyLimits = components['schemas']['ApiKeyLimits'];
type ApiKeyLimitsChange = components['schemas']['ApiKeyLimitsChange'];

/** The limits columns of `api_keys` and `api_key_limit_defaults`, as Postgres reads them. */
export interface LimitColumns {
  requests_per_minute: number | null;
  tokens_per_minute: number | null;
  /** bigint, read as a string. */
  monthly_token_budget: string | number | null;
  /** numeric(12, 2) dollars, read as a string. */
  monthly_spend_budget: string | null;
}


export const NO_LIMITS: ApiKeyLimits = { requests_per_minute: null, tokens_per_minute: null, monthly_token_budget: null, monthly_spend_budget: null };

/** The limits as the API shows them. */
export function toApiLimits(row: LimitColumns): ApiKeyLimits {
  return {
    requests_per_minute: row.requests_per_minute,
    tokens_per_minute: row.tokens_per_minute,
    monthly_token_budget: row.monthly_token_budget === null ? null : Number(row.monthly_token_budget),
    monthly_spend_budget: row.monthly_spend_budget === null ? null : formatUsd(row.monthly_spend_budget),
  };
}

/** The columns a change sets: only the fields it names (`null` clears one). */
export function limitChanges(change: ApiKeyLimitsChange | undefined): Partial<LimitColumns> {
  const columns: Partial<LimitColumns> = {};
  if (!change) return columns;
  if (change.requests_per_minute !== undefined) columns.requests_per_minute = change.requests_per_minute;
  if (change.tokens_per_minute !== undefined) columns.tokens_per_minute = change.tokens_per_minute;
  if (change.monthly_token_budget !== undefined) columns.monthly_token_budget = change.monthly_token_budget;
  if (change.monthly_spend_budget !== undefined) columns.monthly_spend_budget = change.monthly_spend_budget;
  return columns;
}

/** The key's own limits over its organization's defaults; undefined when none applies. */
export function effectiveLimits(own: LimitColumns, defaults: LimitColumns | undefined): EffectiveLimits | undefined {
  const pick = <K extends keyof LimitColumns>(name: K): LimitColumns[K] | null => own[name] ?? defaults?.[name] ?? null;
  const tokens = pick('monthly_token_budget');
  const spend = pick('monthly_spend_budget');
  const limits: EffectiveLimits = {
    requestsPerMinute: pick('requests_per_minute'),
    tokensPerMinute: pick('tokens_per_minute'),
    monthlyTokens: tokens === null ? null : Number(tokens),
    monthlySpendMicros: spend === null ? null : dollarsToMicros(spend),
  };
  return Object.values(limits).some((value) => value !== null) ? limits : undefined;
}

/** `"100.5"` dollars as 100500000 millionths, exactly (at most 6 decimals are kept). */
export function dollarsToMicros(dollars: string): number {
  const [whole = '0', fraction = ''] = dollars.split('.');
  return Number(whole) * 1_000_000 + Number((fraction + '000000').slice(0, 6));
}

function formatUsd(amount: string): string {
  const [whole = '0', fraction = ''] = amount.split('.');
  return `${whole}.${(fraction + '00').slice(0, 2)}`;
}

/** A duration as OpenAI's `x-ratelimit-reset-*` headers write it: `20ms`, `1s`, `1.5s`, `6m0s`, `1h2m3s`. */
export function formatResetDuration(ms: number): string {
  const total = Math.max(0, Math.ceil(ms));
  if (total < 1000) return `${total}ms`;
  const hours = Math.floor(total / 3_600_000);
  const minutes = Math.floor((total % 3_600_000) / 60_000);
  const seconds = Math.round(((total % 60_000) / 1000) * 1000) / 1000;
  if (hours) return `${hours}h${minutes}m${seconds}s`;
  if (minutes) return `${minutes}m${seconds}s`;
  return `${seconds}s`;
}

/** The calendar month (UTC) of `now`: its name (`2026-11`) and when the next one starts. */
export function calendarMonth(now: number): { name: string; endsAt: number } {
  const date = new Date(now);
  const year = date.getUTCFullYear();
  const month = date.getUTCMonth();
  return { name: `${year}-${String(month + 1).padStart(2, '0')}`, endsAt: Date.UTC(year, month + 1, 1) };
}
