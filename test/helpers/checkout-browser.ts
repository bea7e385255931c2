import type { Frame, Page } from 'playwright-core';
import { checkoutPageUrl } from '../../dev/stripe/complete-checkout.ts';
import { APP_ORIGIN } from './app.ts';
import { launchChromium } from './chromium.ts';

/** Where the page that mounts Stripe's embedded Checkout is served (by the browser's own routing: nothing listens there). */
const MOUNT_PAGE = 'https://checkout-mount.test/';

export interface CheckoutInBrowser {
  /** The session as the API answered it. */
  session: { checkout_session_id: string; client_secret: string };
  /** The emulator's base URL; without it, Stripe's embedded Checkout is mounted with Stripe.js and `publishableKey`. */
  emulatorUrl?: string;
  publishableKey?: string;
  card: { number: string; expiry: string; cvc: string };
}

/**
 * Completes a Checkout Session in headless Chromium as a person does: types the test card into the
 * form and submits, then waits for the redirect to the session's return URL (on `APP_ORIGIN`,
 * answered by the browser's routing). On the emulator the form is its Checkout page; on a Stripe
 * test account (`make test-billing`) it is Stripe's embedded Checkout, which a page of ours mounts
 * with Stripe.js (`initEmbeddedCheckout`, as a web app does with the session's `client_secret`).
 * Both forms carry Stripe Checkout's field ids (dev/stripe/pages.ts).
 */
export async function completeCheckoutInBrowser(options: CheckoutInBrowser): Promise<void> {
  const browser = await launchChromium();
  try {
    const page = await browser.newPage();
    await page.route(`${APP_ORIGIN}/**`, (route) => route.fulfill({ status: 200, contentType: 'text/plain', body: 'back in the web app' }));
    if (options.emulatorUrl) {
      await page.goto(checkoutPageUrl(options.emulatorUrl, options.session.checkout_session_id));
    } else {
      if (!options.publishableKey) throw new Error('Stripe.js needs the account\'s publishable key (STRIPE_TEST_PUBLISHABLE_KEY)');
      await page.route(MOUNT_PAGE, (route) => route.fulfill({ status: 200, contentType: 'text/html', body: mountPage(options.publishableKey ?? '', options.session.client_secret) }));
      await page.goto(MOUNT_PAGE);
    }
    const form = await frameWith(page, '#cardNumber');
    await form.locator('#cardNumber').pressSequentially(options.card.number);
    await form.locator('#cardExpiry').pressSequentially(options.card.expiry);
    await form.locator('#cardCvc').pressSequentially(options.card.cvc);
    for (const [field, value] of [['#billingName', 'Test Cardholder'], ['#billingPostalCode', '10001']] as const) {
      const input = form.locator(field);
      if (await input.isVisible()) await input.fill(value);
    }
    await form.locator('[data-testid="hosted-payment-submit-button"]').click();
    await page.waitForURL((url) => url.href.startsWith(APP_ORIGIN), { timeout: 60_000 });
  } finally {
    await browser.close();
  }
}

/** The frame (the page's own, or Stripe's iframe) that shows `selector`, once it does. */
async function frameWith(page: Page, selector: string): Promise<Frame> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    for (const frame of page.frames()) if (await frame.locator(selector).isVisible().catch(() => false)) return frame;
    await page.waitForTimeout(200);
  }
  throw new Error(`no frame of ${page.url()} shows ${selector}`);
}

function mountPage(publishableKey: string, clientSecret: string): string {
  return `<!doctype html><html><head><script src="https://js.stripe.com/v3/"></script></head><body><div id="checkout"></div>
<script>
Stripe(${JSON.stringify(publishableKey)}).initEmbeddedCheckout({ fetchClientSecret: async () => ${JSON.stringify(clientSecret)} }).then((checkout) => checkout.mount('#checkout'));
</script></body></html>`;
}
