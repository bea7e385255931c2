/**
 * The import graph of `src/` between rooms (a folder of `src/`, or a file at its top), and the
 * pairs of rooms that import each other: each such pair has arrows running back up a layering.
 *
 *   node scripts/import-layers.ts [--files]   (--files: list the file imports of each pair)
 *
 * Type-only imports count: they tie the rooms together for a reader as much as a value import does.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';

const SRC = path.resolve('src');

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) return filesUnder(full);
    return full.endsWith('.ts') ? [full] : [];
  });
}

/** The room of a file of src/: its first folder, or the file itself at the top. */
const roomOf = (file: string) => path.relative(SRC, file).split(path.sep)[0] ?? '';

const arrows = new Map<string, Set<string>>();
for (const file of filesUnder(SRC)) {
  const text = readFileSync(file, 'utf8');
  for (const match of text.matchAll(/^(?:import|export)[^'"]*from '(\.[^']+)'/gm)) {
    const target = path.resolve(path.dirname(file), match[1] ?? '');
    if (!target.startsWith(SRC + path.sep)) continue;
    const [from, to] = [roomOf(file), roomOf(target)];
    if (from === to) continue;
    const key = `${from} -> ${to}`;
    const pairs = arrows.get(key) ?? new Set<string>();
    pairs.add(`${path.relative(SRC, file)} -> ${path.relative(SRC, target)}`);
    arrows.set(key, pairs);
  }
}

const mutual = [...arrows.keys()]
  .map((key) => key.split(' -> ') as [string, string])
  .filter(([from, to]) => from < to && arrows.has(`${to} -> ${from}`));
process.stdout.write(`${arrows.size} arrows between rooms; ${mutual.length} pairs of rooms import each other\n`);
for (const [a, b] of mutual) {
  const there = arrows.get(`${a} -> ${b}`) ?? new Set();
  const back = arrows.get(`${b} -> ${a}`) ?? new Set();
  process.stdout.write(`  ${a} <-> ${b} (${there.size} / ${back.size} file imports)\n`);
  if (process.argv.includes('--files')) for (const line of [...there, ...back]) process.stdout.write(`      ${line}\n`);
}
