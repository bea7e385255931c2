/**
 * CI's last step: fails on a test that was skipped (or left as todo) unless `.ci/expected-skips.txt`
 * names it, so a skip nobody expected (a missing binary, a service not reachable, a `runIf` turned
 * false) fails CI instead of passing quietly; each listed skip says why it may happen.
 *
 *   node scripts/check-skips.ts <vitest JSON report>...
 *
 * A line of the list is `<file> > <full test name>`; a trailing `*` matches any end (a name that
 * holds a path). Exit 1 with the unexpected skips, one a line.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';

interface Report {
  testResults: Array<{ name: string; assertionResults: Array<{ status: string; fullName: string }> }>;
}

const root = path.resolve(import.meta.dirname, '..');
const listed = readFileSync(path.join(root, '.ci/expected-skips.txt'), 'utf8')
  .split('\n')
  .map((line) => line.trim())
  .filter((line) => line && !line.startsWith('#'));
const expected = (name: string) => listed.some((line) => (line.endsWith('*') ? name.startsWith(line.slice(0, -1)) : name === line));

const unexpected = new Set<string>();
for (const report of process.argv.slice(2)) {
  const { testResults } = JSON.parse(readFileSync(report, 'utf8')) as Report;
  for (const file of testResults) {
    for (const test of file.assertionResults) {
      if (test.status === 'passed' || test.status === 'failed') continue;
      const name = `${path.relative(root, file.name)} > ${test.fullName}`;
      if (!expected(name)) unexpected.add(name);
    }
  }
}
if (unexpected.size) {
  process.stderr.write(`ci: ${unexpected.size} tests skipped that .ci/expected-skips.txt does not expect:\n${[...unexpected].map((name) => `  ${name}\n`).join('')}`);
  process.exit(1);
}
process.stdout.write(`ci: no unexpected skip (${listed.length} may skip)\n`);
