import { describe, expect, it } from 'vitest';
import { generateKey, isWellFormedKey, KEY_PREFIX, keyPrefixOf } from '../../src/api-keys/key-format.ts';

/** Keys whose checksums the hand-written CRC32 of the first release computed: the format may not drift. */
const PINNED = [
  'svc-sk-AbCdEfGhIjKlMnOpQrStUvWxYz0123451HTd0k',
  'svc-sk-000000000000000000000000000000002wjyrI',
  'svc-sk-zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz4W8LJS',
];

/** Near misses of the first pinned key. */
const MALFORMED = {
  'another prefix': 'sk-AbCdEfGhIjKlMnOpQrStUvWxYz0123451HTd0k',
  'one character short': 'svc-sk-AbCdEfGhIjKlMnOpQrStUvWxYz0123451HTd0',
  'one character long': 'svc-sk-AbCdEfGhIjKlMnOpQrStUvWxYz0123451HTd0kk',
  'a character outside base62': 'svc-sk-AbCdEfGhIjKlMnOpQrStUvWxYz01234_1HTd0k',
  nothing: '',
};

describe('the API key format', () => {
  it('makes keys of svc-sk-, 32 base62 characters and a 6-character checksum, each different', () => {
    const keys = Array.from({ length: 50 }, generateKey);
    for (const key of keys) {
      expect(key).toMatch(/^svc-sk-[0-9A-Za-z]{38}$/);
      expect(isWellFormedKey(key)).toBe(true);
    }
    expect(new Set(keys).size).toBe(keys.length);
  });

  it.each(PINNED)('accepts %s, whose checksum was computed by the first release', (key) => {
    expect(isWellFormedKey(key)).toBe(true);
  });

  it('refuses a key with one character of its secret mistyped', () => {
    const key = PINNED[0] as string;
    const typo = `${key.slice(0, 10)}${key[10] === 'x' ? 'y' : 'x'}${key.slice(11)}`;
    expect(isWellFormedKey(typo)).toBe(false);
  });

  it('refuses a key whose checksum is changed', () => {
    const key = PINNED[1] as string;
    expect(isWellFormedKey(`${key.slice(0, -1)}${key.endsWith('J') ? 'K' : 'J'}`)).toBe(false);
  });

  it.each(Object.entries(MALFORMED))('refuses %s', (_what, key) => {
    expect(isWellFormedKey(key)).toBe(false);
  });

  it('shows the prefix and the first 8 secret characters as the key prefix', () => {
    expect(keyPrefixOf(PINNED[0] as string)).toBe(`${KEY_PREFIX}AbCdEfGh`);
  });
});
