import { describe, expect, it } from 'vitest';
import { anchors, links, problemsOf, slug } from '../../scripts/check-doc-links.ts';

describe('the documentation links check (make lint)', () => {
  it('makes GitHub slugs: lower case, punctuation dropped but - and _, spaces to -', () => {
    expect(slug('Payments: Stripe and the Stripe emulator')).toBe('payments-stripe-and-the-stripe-emulator');
    expect(slug('Serving engine (Xinference)')).toBe('serving-engine-xinference');
    expect(slug('What make run starts')).toBe('what-make-run-starts');
    expect(slug('OpenAPI 3.0.3, not 3.1')).toBe('openapi-303-not-31');
    expect(slug('usage_records — at scale')).toBe('usage_records--at-scale');
  });

  it('numbers repeated headings and ignores those in fenced blocks', () => {
    expect([...anchors('# A b\n## A b\n```sh\n# not a heading\n```\n## `code` here\n')]).toEqual(['a-b', 'a-b-1', 'code-here']);
  });

  it('takes relative links outside code, over line breaks, and leaves other schemes alone', () => {
    const text = 'See [a](b.md#c), [web](https://x.test/y), `[code](no.md)`, [two\nlines](d.md)\n```\n[fenced](no.md)\n```\n[ref]: e.md\n';
    expect(links(text)).toEqual([
      { target: 'b.md#c', line: 1 },
      { target: 'd.md', line: 2 },
      { target: 'e.md', line: 6 },
    ]);
  });

  it('reports a missing file and a missing heading, and passes what exists', () => {
    const files: Record<string, string> = { 'docs/a.md': '# A\n[ok](b.md#b-c) [self](#a) [gone](c.md) [wrong](b.md#nope) [up](../README.md)\n', 'docs/b.md': '# B c\n' };
    const read = (name: string) => files[name] ?? '';
    expect(problemsOf('docs/a.md', read, (name) => name in files || name === 'README.md')).toEqual([
      'docs/a.md:2: c.md: no such file',
      'docs/a.md:2: b.md#nope: no heading #nope in docs/b.md',
    ]);
  });
});
