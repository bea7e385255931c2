// Fails CI on a test that was skipped (or left as todo) unless .ci/expected-skips.txt names it:
// a test that skips on the environment must say so there, so a skip nobody expected (a missing
// binary, a service not reachable, a `runIf` turned false) is a failure, not a quiet pass.
// Usage: node .ci/check-skips.mjs <vitest JSON report>...
import { readFileSync } from 'node:fs';
import path from 'node:path';

const listed = readFileSync(new URL('./expected-skips.txt', import.meta.url), 'utf8')
  .split('\n')
  .map((line) => line.trim())
  .filter((line) => line && !line.startsWith('#'));
const expected = (name) => listed.some((line) => (line.endsWith('*') ? name.startsWith(line.slice(0, -1)) : name === line));
const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const unexpected = new Set();
for (const report of process.argv.slice(2)) {
  const { testResults } = JSON.parse(readFileSync(report, 'utf8'));
  for (const file of testResults) {
    for (const test of file.assertionResults) {
      if (test.status === 'passed' || test.status === 'failed') continue;
      const name = `${path.relative(root, file.name)} > ${test.fullName}`;
      if (!expected(name)) unexpected.add(name);
    }
  }
}
if (unexpected.size) {
  console.error(`ci: ${unexpected.size} tests skipped that .ci/expected-skips.txt does not expect:`);
  for (const name of unexpected) console.error(`  ${name}`);
  process.exit(1);
}
console.log(`ci: no unexpected skip (${listed.length} may skip)`);
