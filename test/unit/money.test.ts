import { describe, expect, it } from 'vitest';
import { formatCents, roundedSumCents, toCents } from '../../src/metering/money.ts';

describe('amounts in exact decimals', () => {
  it('sums amounts of any scale exactly and rounds once, half away from zero', () => {
    // Each rounds to 0.00 on its own; together they make 1.2 cents.
    expect(roundedSumCents(['0.004', '0.0035', '0.0045'])).toBe(1n);
    expect(roundedSumCents(['0.004999999', '0.000000001'])).toBe(1n);
    expect(roundedSumCents(['0.0049999999'])).toBe(0n);
    expect(roundedSumCents(['-0.005'])).toBe(-1n);
    expect(roundedSumCents(['357.5664', '1.4460339'])).toBe(35_901n);
    expect(roundedSumCents([])).toBe(0n);
    // Binary floats would not: 0.1 + 0.2 of a cent a thousand times.
    expect(roundedSumCents(Array.from({ length: 1000 }, (_, i) => (i % 2 ? '0.001' : '0.002')))).toBe(150n);
  });

  it('reads and writes cents', () => {
    expect(toCents('12.3')).toBe(1230n);
    expect(toCents('-0.05')).toBe(-5n);
    expect(formatCents(35_902n)).toBe('359.02');
    expect(formatCents(-5n)).toBe('-0.05');
  });
});
