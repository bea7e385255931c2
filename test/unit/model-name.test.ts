import { describe, expect, it } from 'vitest';
import { ModelNameSwap } from '../../src/inference/model-name.ts';

const UID = 'dep-5ae01c71-4f2e-4d7a-9c55-0d8f2b1e7a10';

/** The answer through a swap, cut into pieces at the given offsets. */
function through(answer: string, cuts: number[], asked = 'qwen2.5-instruct'): string {
  const swap = new ModelNameSwap(UID, asked);
  const bytes = Buffer.from(answer);
  const out: Buffer[] = [];
  let from = 0;
  for (const cut of [...cuts, bytes.length]) {
    out.push(swap.push(bytes.subarray(from, cut)));
    from = cut;
  }
  out.push(swap.end());
  return Buffer.concat(out).toString();
}

describe('ModelNameSwap', () => {
  const events = [1, 2, 3].map((i) => `data: {"id":"c","object":"chat.completion.chunk","model": "${UID}","choices":[{"delta":{"content":"w${i}"}}]}\n\n`).join('') + 'data: [DONE]\n\n';

  it('renames every `model` token of a stream, wherever the pieces are cut', () => {
    const expected = events.replaceAll(`"${UID}"`, '"qwen2.5-instruct"');
    for (let cut = 0; cut <= events.length; cut++) expect(through(events, [cut])).toBe(expected);
    expect(through(events, Array.from({ length: events.length }, (_, i) => i))).toBe(expected);
  });

  it('leaves the uid where it is not a whole string token: in text, after an escaped quote, as a prefix', () => {
    const answer = JSON.stringify({ model: UID, content: `say "${UID}" or ${UID} or "${UID}x"`, other: `\\` }) + JSON.stringify({ path: `C:\\\\"${UID}"` });
    const once = answer.replace(`"model":"${UID}"`, '"model":"a"');
    for (let cut = 0; cut <= answer.length; cut++) expect(through(answer, [cut], 'a')).toBe(once);
  });

  it('counts backslashes carried over from the previous piece', () => {
    // The content ends in one escaped backslash, then the string closes: the quote before the uid is not escaped.
    const answer = `{"content":"\\\\","model":"${UID}"}`;
    const escapedQuote = `{"content":"\\"${UID}\\""}`;
    for (let cut = 0; cut <= answer.length; cut++) expect(through(answer, [cut], 'a')).toBe(`{"content":"\\\\","model":"a"}`);
    for (let cut = 0; cut <= escapedQuote.length; cut++) expect(through(escapedQuote, [cut], 'a')).toBe(escapedQuote);
  });

  it('hands a piece without the token back unchanged, and an answer that ends on a token’s start whole', () => {
    const swap = new ModelNameSwap(UID, 'a');
    const piece = Buffer.from('data: {"choices":[]}\n\n');
    expect(swap.push(piece)).toBe(piece);
    expect(through(`{"x":"${UID.slice(0, 10)}`, [3])).toBe(`{"x":"${UID.slice(0, 10)}`);
  });

  it('writes a name that needs escaping as a JSON string', () => {
    expect(JSON.parse(through(`{"model":"${UID}"}`, [], 'a "quoted" \\ name'))).toEqual({ model: 'a "quoted" \\ name' });
  });
});
