import { checkoutPageUrl, completeCheckoutSession } from '../../dev/stripe/complete-checkout.ts';
import { APP_ORIGIN, type TestApp } from '../helpers/app.ts';
import { waitUntil } from '../helpers/net.ts';
import type { SignedInUser } from './accounts.ts';

/** Stripe's test cards, as typed on its Checkout page. */
export const CARDS = {
  visa: { number: '4242 4242 4242 4242', expiry: '12 / 34', cvc: '123' },
  mastercard: { number: '5555 5555 5555 4444', expiry: '03 / 33', cvc: '123' },
};

/**
 * Opens a setup session through the API and completes it on the emulator's Checkout page with a
 * test card, as a newcomer does from `make run`; the session as the API answered it, and the page's answer.
 */
export async function checkoutWithCard(app: TestApp, owner: SignedInUser, purpose: 'payment_method_setup' | 'postpaid_activation', card = CARDS.visa) {
  const { data, response } = await owner.api.POST('/v1/billing/checkout/setup-session', { body: { purpose, return_url: `${APP_ORIGIN}/billing` } });
  if (!data || !app.stripe) throw new Error(`no setup session: ${response.status}`);
  const completion = await completeCheckoutSession(checkoutPageUrl(app.stripe.emulator.url, data.checkout_session_id), card);
  return { session: data, status: response.status, completion };
}

/** Waits until every event the processor (the emulator) sent so far has been processed by the service. */
export async function webhooksSettled(app: TestApp): Promise<void> {
  const stripe = app.stripe?.sdk;
  if (!stripe) throw new Error('the app has no Stripe emulator');
  await waitUntil(async () => {
    const ids = (await stripe.events.list({ limit: 100 })).data.map((event) => event.id);
    const rows = await app.db('billing_webhook_events').whereIn('id', ids).whereNotNull('processed_at').count<{ count: string }[]>('id as count');
    return Number(rows[0]?.count) === ids.length;
  }, 'every webhook processed');
}
