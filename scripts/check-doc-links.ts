/**
 * `make lint`: every relative link of README.md and docs/**\/*.md points to a file that exists and,
 * with a `#anchor` into a Markdown file, to one of its headings (or an `<a id>`/`<a name>`), by
 * GitHub's slugs: lower case, punctuation dropped except `-` and `_`, each space a `-`, a repeated
 * heading's slug suffixed `-1`, `-2`…. Links in fenced blocks and code spans are not links.
 *
 *   node scripts/check-doc-links.ts [file.md …]
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

/** The text without fenced blocks and code spans (each replaced by spaces, so line numbers hold). */
function prose(markdown: string): string {
  const blank = (text: string) => text.replace(/[^\n]/g, ' ');
  return markdown.replace(/^ *(```|~~~)[^\n]*\n[\s\S]*?^ *\1[^\n]*$/gm, blank).replace(/(`+)(?!`)[\s\S]*?[^`]\1(?!`)/g, blank);
}

/** GitHub's anchor for a heading's text. */
export function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // a link: its text
    .replace(/<[^>]+>/g, '')
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{N}\p{M}\s_-]/gu, '').replace(/\s/g, '-');
}

/** The anchors of a Markdown file: its headings' slugs (repeats numbered) and its explicit ids. */
export function anchors(markdown: string): Set<string> {
  const found = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of markdown.replace(/^ *(```|~~~)[^\n]*\n[\s\S]*?^ *\1[^\n]*$/gm, '').split('\n')) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading) {
      const base = slug((heading[1] ?? '').replaceAll('`', ''));
      const count = seen.get(base) ?? 0;
      seen.set(base, count + 1);
      found.add(count ? `${base}-${count}` : base);
    }
    for (const id of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) found.add(id[1] ?? '');
  }
  return found;
}

/** The relative links of a Markdown file, each with its line. */
export function links(markdown: string): { target: string; line: number }[] {
  const text = prose(markdown);
  const found: { target: string; line: number }[] = [];
  const line = (index: number) => text.slice(0, index).split('\n').length;
  for (const match of text.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) found.push({ target: match[1] ?? '', line: line(match.index) });
  for (const match of text.matchAll(/^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/gm)) found.push({ target: match[1] ?? '', line: line(match.index) });
  return found.filter(({ target }) => !/^[a-z][a-z0-9+.-]*:/i.test(target));
}

/** What is wrong with the links of one file, as `file:line: problem` lines. */
export function problemsOf(
  file: string,
  read: (file: string) => string = (name) => readFileSync(name, 'utf8'),
  exists: (file: string) => boolean = existsSync,
): string[] {
  const problems: string[] = [];
  for (const { target, line } of links(read(file))) {
    const [pathPart = '', anchor] = target.split('#', 2);
    const destination = pathPart ? path.join(path.dirname(file), decodeURIComponent(pathPart)) : file;
    const at = `${file}:${line}: ${target}`;
    if (!exists(destination)) {
      problems.push(`${at}: no such file`);
      continue;
    }
    if (anchor === undefined || !destination.endsWith('.md')) continue;
    if (!anchors(read(destination)).has(decodeURIComponent(anchor))) problems.push(`${at}: no heading #${anchor} in ${destination}`);
  }
  return problems;
}

function markdownFiles(folder: string): string[] {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const name = path.join(folder, entry.name);
    if (entry.isDirectory()) return markdownFiles(name);
    return entry.name.endsWith('.md') ? [name] : [];
  });
}

if (import.meta.main) {
  const files = process.argv.length > 2 ? process.argv.slice(2) : ['README.md', ...markdownFiles('docs').sort()];
  const problems = files.flatMap((file) => problemsOf(file));
  if (problems.length) {
    process.stderr.write(`${problems.join('\n')}\n${problems.length} broken link(s)\n`);
    process.exit(1);
  }
  const count = files.reduce((sum, file) => sum + links(readFileSync(file, 'utf8')).length, 0);
  process.stdout.write(`${count} relative links in ${files.length} Markdown files, each to an existing file and heading\n`);
}
