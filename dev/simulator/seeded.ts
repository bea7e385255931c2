import { createHash } from 'node:crypto';

/**
 * The simulator's randomness: every output is drawn from a generator seeded by the request's own
 * text, so the same request always gets the same answer and tests can compare answers.
 */

const WORDS = [
  'the', 'model', 'answers', 'with', 'simulated', 'words', 'drawn', 'from', 'a', 'seeded', 'list',
  'cluster', 'token', 'stream', 'quietly', 'returns', 'every', 'request', 'same', 'text', 'again',
  'gpu', 'memory', 'holds', 'weights', 'while', 'layers', 'compute', 'bright', 'answers', 'for',
  'you', 'and', 'them', 'under', 'clear', 'skies', 'river', 'stone', 'light', 'signal', 'north',
  'garden', 'paper', 'window', 'orbit', 'harbor', 'meadow', 'silver', 'copper', 'lantern', 'echo',
  'forest', 'summit', 'ember', 'tide', 'cedar', 'prism', 'falcon', 'canyon', 'willow', 'ridge', 'delta', 'nova',
];

export function hashSeed(text: string): number {
  return createHash('sha256').update(text).digest().readUInt32LE(0);
}

/** mulberry32: a small, fast, seedable PRNG. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A word of the simulator's list, drawn with `random`. */
export function word(random: () => number): string {
  return WORDS[Math.floor(random() * WORDS.length)] as string;
}

export function answerWords(seedText: string, count: number): string[] {
  const random = prng(hashSeed(seedText));
  const out: string[] = [];
  for (let i = 0; i < count; i++) out.push(word(random));
  return out;
}
