import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    setupFiles: ['test/helpers/contract-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Two files at a time, also on 2 cores (Vitest's default there is one): most of a file's time is
    // spent waiting on its servers and Postgres, and two halve the suite's time (about 8 minutes
    // instead of 15 here). More would crowd Postgres's 100 connections (each file's app has pools).
    maxWorkers: 2,
    // Memory checks collect garbage, dead Buffers included, before they measure (test/helpers/memory.ts).
    execArgv: ['--expose-gc', '--no-concurrent-array-buffer-sweeping'],
    // The engine conformance suite runs against the simulator here, the Stripe suites against the
    // Stripe emulator; `make test-engine` and `make test-billing` point them at the real ones.
    env: { NODE_ENV: 'test', LOG_LEVEL: 'silent', XINFERENCE_URL: '', STRIPE_TEST_SECRET_KEY: '', STRIPE_TEST_PUBLISHABLE_KEY: '' },
  },
});
