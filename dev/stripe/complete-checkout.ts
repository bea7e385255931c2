/**
 * Does what a person does on the emulator's Checkout page: enters a test card and submits. Tests
 * use it instead of a browser; it only works against the emulator (Stripe's Checkout needs one).
 */
export interface CheckoutCompletion {
  /** 303 when the card was saved (then `redirect` is the success URL), 402 when declined, 400 when refused. */
  status: number;
  redirect: string | null;
  /** The page's answer (the reason of a decline, in a role="alert" paragraph). */
  page: string;
}

/** The emulator's Checkout page of a session (its `url` in hosted mode; embedded sessions have none at Stripe). */
export function checkoutPageUrl(emulatorUrl: string, sessionId: string): string {
  return `${emulatorUrl}/checkout/${sessionId}`;
}

export async function completeCheckoutSession(sessionUrl: string, card = { number: '4242 4242 4242 4242', expiry: '12 / 34', cvc: '123' }): Promise<CheckoutCompletion> {
  const response = await fetch(sessionUrl, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ card_number: card.number, card_expiry: card.expiry, card_cvc: card.cvc }).toString(),
  });
  return { status: response.status, redirect: response.headers.get('location'), page: await response.text() };
}
