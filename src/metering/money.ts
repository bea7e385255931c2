/**
 * Amounts as exact decimal strings (what Postgres renders of a numeric) and whole cents (bigint):
 * never a binary float, so no sum loses or adds a cent.
 */

/** A decimal amount with at most 2 decimals (numeric(…, 2), or a rounded amount) in cents, exactly. */
export function toCents(amount: string): bigint {
  const [whole = '0', fraction = ''] = amount.split('.');
  const negative = whole.startsWith('-');
  const cents = BigInt(whole.replace('-', '')) * 100n + BigInt((fraction + '00').slice(0, 2));
  return negative ? -cents : cents;
}

export function formatCents(cents: bigint): string {
  const sign = cents < 0n ? '-' : '';
  const magnitude = cents < 0n ? -cents : cents;
  return `${sign}${magnitude / 100n}.${String(magnitude % 100n).padStart(2, '0')}`;
}

/**
 * The exact sum of decimal amounts of any scale, rounded once to the cent, half away from zero:
 * what Stripe charges for an invoice line of metered usage (its quantity times the price's
 * `unit_amount_decimal`, rounded to the currency's minor unit once per line).
 */
export function roundedSumCents(amounts: readonly string[]): bigint {
  const scale = Math.max(2, ...amounts.map((amount) => amount.split('.')[1]?.length ?? 0));
  const total = amounts.reduce((sum, amount) => sum + scaled(amount, scale), 0n);
  const unit = 10n ** BigInt(scale - 2);
  const magnitude = total < 0n ? -total : total;
  const cents = (magnitude + unit / 2n) / unit;
  return total < 0n ? -cents : cents;
}

/** `amount` × 10^scale, exactly (`scale` at least its number of decimals). */
function scaled(amount: string, scale: number): bigint {
  const negative = amount.startsWith('-');
  const [whole = '0', fraction = ''] = amount.replace('-', '').split('.');
  const value = BigInt(whole) * 10n ** BigInt(scale) + BigInt(fraction.padEnd(scale, '0') || '0');
  return negative ? -value : value;
}
