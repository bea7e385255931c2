/**
 * Stripe's test cards (https://docs.stripe.com/testing#cards and #declined-payments), by number and
 * by the test PaymentMethod ids the API accepts in test mode (`pm_card_visa`, …):
 * - 4242 4242 4242 4242 succeeds;
 * - 4000 0000 0000 0002 is declined (`card_declined`, `generic_decline`) when it is set up;
 * - 4000 0000 0000 0341 attaches, then every charge fails (how invoice `payment_failed` is tested).
 */
export interface TestCard {
  number: string;
  brand: 'visa' | 'mastercard';
  funding: 'credit';
  /** Refused when saved (checkout setup, attach). */
  declinesSetup: boolean;
  /** Saved, but every charge on it fails. */
  declinesCharges: boolean;
}

const CARDS: TestCard[] = [
  { number: '4242424242424242', brand: 'visa', funding: 'credit', declinesSetup: false, declinesCharges: false },
  { number: '5555555555554444', brand: 'mastercard', funding: 'credit', declinesSetup: false, declinesCharges: false },
  { number: '4000000000000002', brand: 'visa', funding: 'credit', declinesSetup: true, declinesCharges: true },
  { number: '4000000000000341', brand: 'visa', funding: 'credit', declinesSetup: false, declinesCharges: true },
];

/** The test PaymentMethod ids Stripe accepts in place of a created one. */
const TEST_PAYMENT_METHODS: Record<string, string> = {
  pm_card_visa: '4242424242424242',
  pm_card_mastercard: '5555555555554444',
  pm_card_chargeDeclined: '4000000000000002',
  pm_card_chargeCustomerFail: '4000000000000341',
};

export function testCard(number: string): TestCard | undefined {
  const digits = number.replace(/[\s-]/g, '');
  return CARDS.find((card) => card.number === digits);
}

export function testPaymentMethodCard(id: string): TestCard | undefined {
  const number = TEST_PAYMENT_METHODS[id];
  return number ? testCard(number) : undefined;
}

/** Stripe's answer to a declined card (402, `card_error`). */
export const DECLINE = { code: 'card_declined', declineCode: 'generic_decline', message: 'Your card was declined.' } as const;
