import { defineConfig } from 'vitest/config';

/**
 * `make test-engine`: the engine conformance suite (test/engine/) against the real Xinference
 * cluster of XINFERENCE_URL. No database; one file at a time; long timeouts, since real models load
 * in minutes.
 */
export default defineConfig({
  test: {
    include: ['test/engine/**/*.test.ts'],
    testTimeout: 45 * 60_000,
    hookTimeout: 5 * 60_000,
    pool: 'forks',
    fileParallelism: false,
    env: { NODE_ENV: 'test', LOG_LEVEL: 'silent' },
  },
});
