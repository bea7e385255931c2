import { describe, expect, it } from 'vitest';
import { decodeForm } from '../../dev/stripe/form.ts';

describe("the Stripe emulator's form decoding (Stripe's bracket notation)", () => {
  it('nests objects and arrays as the stripe SDK encodes them', () => {
    const body = 'customer=cus_1&items[0][price]=price_1&items[1][price]=price_2&invoice_settings[default_payment_method]=pm_1&expand[0]=latest_invoice&metadata[a b]=c%26d';
    expect(decodeForm(body)).toEqual({
      customer: 'cus_1',
      items: [{ price: 'price_1' }, { price: 'price_2' }],
      invoice_settings: { default_payment_method: 'pm_1' },
      expand: ['latest_invoice'],
      metadata: { 'a b': 'c&d' },
    });
  });

  it('appends `a[]` elements and keeps an empty value (how a field is unset)', () => {
    expect(decodeForm('lookup_keys[]=a&lookup_keys[]=b&description=')).toEqual({ lookup_keys: ['a', 'b'], description: '' });
  });
});
