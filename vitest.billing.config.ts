import { defineConfig } from 'vitest/config';

/**
 * `make test-billing`: the Stripe suites through the `stripe` SDK against a Stripe test-mode
 * account (`STRIPE_SECRET_KEY=sk_test_… STRIPE_PUBLISHABLE_KEY=pk_test_… make test-billing`, handed
 * to the suites as STRIPE_TEST_SECRET_KEY and STRIPE_TEST_PUBLISHABLE_KEY; `make test` runs them on
 * the Stripe emulator). The usage reporting suite
 * needs a database (DATABASE_URL, or the embedded one); long timeouts, since Stripe aggregates
 * meter events in the background.
 */
export default defineConfig({
  test: {
    include: [
      'test/integration/stripe-emulator.test.ts',
      'test/integration/payment-processor.test.ts',
      'test/service/usage-reporting.test.ts',
      // The platform's billing over HTTP: Checkout in headless Chromium (Stripe.js with STRIPE_TEST_PUBLISHABLE_KEY), events relayed to the webhook route.
      'test/integration/billing-over-http.test.ts',
    ],
    globalSetup: ['test/helpers/global-setup.ts'],
    testTimeout: 5 * 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    env: { NODE_ENV: 'test', LOG_LEVEL: 'silent' },
  },
});
