import { describe, expect, it } from 'vitest';
import { calendarMonth, dollarsToMicros, effectiveLimits, formatResetDuration, limitChanges, toApiLimits } from '../../src/api-keys/key-limits.ts';

const none = { requests_per_minute: null, tokens_per_minute: null, monthly_token_budget: null, monthly_spend_budget: null };

describe('key limits', () => {
  it.each([
    [0, '0ms'],
    [20, '20ms'],
    [999.2, '1s'],
    [1000, '1s'],
    [1500, '1.5s'],
    [59_999, '59.999s'],
    [360_000, '6m0s'],
    [3_723_000, '1h2m3s'],
  ])('writes %d ms as OpenAI does: %s', (ms, text) => {
    expect(formatResetDuration(ms)).toBe(text);
  });

  it('takes each limit of the key, else its organization’s default; none at all is undefined', () => {
    expect(effectiveLimits(none, undefined)).toBeUndefined();
    expect(effectiveLimits(none, none)).toBeUndefined();
    expect(effectiveLimits({ ...none, requests_per_minute: 5 }, { ...none, requests_per_minute: 100, monthly_token_budget: '7000000000', monthly_spend_budget: '12.34' })).toEqual({
      requestsPerMinute: 5,
      tokensPerMinute: null,
      monthlyTokens: 7_000_000_000,
      monthlySpendMicros: 12_340_000,
    });
  });

  it('reads dollar amounts exactly in millionths', () => {
    expect(dollarsToMicros('100')).toBe(100_000_000);
    expect(dollarsToMicros('0.01')).toBe(10_000);
    expect(dollarsToMicros('25.5')).toBe(25_500_000);
  });

  it('shows amounts with two decimals and budgets as numbers, and changes only the fields named', () => {
    expect(toApiLimits({ ...none, monthly_token_budget: '5000000000', monthly_spend_budget: '25.5' })).toEqual({ ...none, monthly_token_budget: 5_000_000_000, monthly_spend_budget: '25.50' });
    expect(limitChanges({ tokens_per_minute: null })).toEqual({ tokens_per_minute: null });
    expect(limitChanges(undefined)).toEqual({});
  });

  it('names the calendar month (UTC) and when the next one starts', () => {
    expect(calendarMonth(Date.UTC(2026, 11, 31, 23, 59))).toEqual({ name: '2026-12', endsAt: Date.UTC(2027, 0, 1) });
  });
});
