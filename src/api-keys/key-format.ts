import { randomInt } from 'node:crypto';
import { crc32 } from 'node:zlib';

/**
 * The API key format (DESIGN.md §3): `svc-sk-` + 32 random base62 characters + a 6-character base62
 * checksum (CRC32 of the random part), so a secret scanner or the service can reject a mistyped or
 * made-up key without a lookup. `key_prefix` is `svc-sk-` and the first 8 secret characters.
 */
export const KEY_PREFIX = 'svc-sk-';
const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const RANDOM_LENGTH = 32;
const CHECKSUM_LENGTH = 6;
const SHAPE = new RegExp(`^${KEY_PREFIX}[0-9A-Za-z]{${RANDOM_LENGTH + CHECKSUM_LENGTH}}$`);

function base62(value: number, length: number): string {
  let out = '';
  for (let i = 0; i < length; i++) {
    out = ALPHABET[value % 62] + out;
    value = Math.floor(value / 62);
  }
  return out;
}

export function generateKey(): string {
  let random = '';
  for (let i = 0; i < RANDOM_LENGTH; i++) random += ALPHABET[randomInt(62)];
  return `${KEY_PREFIX}${random}${base62(crc32(random), CHECKSUM_LENGTH)}`;
}

/** True when `key` has the shape and a matching checksum. */
export function isWellFormedKey(key: string): boolean {
  if (!SHAPE.test(key)) return false;
  const random = key.slice(KEY_PREFIX.length, KEY_PREFIX.length + RANDOM_LENGTH);
  return key.endsWith(base62(crc32(random), CHECKSUM_LENGTH));
}

export function keyPrefixOf(key: string): string {
  return key.slice(0, KEY_PREFIX.length + 8);
}
