import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    setupFiles: ['test/helpers/contract-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // The engine conformance suite runs against the simulator here; `make test-engine` points it at a real cluster.
    env: { NODE_ENV: 'test', LOG_LEVEL: 'silent', XINFERENCE_URL: '' },
  },
});
