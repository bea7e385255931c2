import { defineConfig } from 'vitest/config';

/**
 * `make test-billing`: the Stripe suites through the `stripe` SDK against the Stripe test-mode
 * account of STRIPE_TEST_SECRET_KEY (`make test` runs them on the Stripe emulator). No database;
 * long timeouts, since Stripe aggregates meter events in the background.
 */
export default defineConfig({
  test: {
    include: ['test/integration/stripe-emulator.test.ts', 'test/integration/payment-processor.test.ts'],
    testTimeout: 5 * 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    env: { NODE_ENV: 'test', LOG_LEVEL: 'silent' },
  },
});
