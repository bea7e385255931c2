import { createCipheriv, createDecipheriv, createHmac, hash, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { encodeBase32LowerCaseNoPadding } from '@oslojs/encoding';

/**
 * The service's secret-handling primitives, in one place: random tokens, their hashes at rest,
 * constant-time comparison, and authenticated encryption with keys derived from `APP_SECRET`.
 */

/** A random token of `bytes` bytes (default 20 = 160 bits), base32 lower-case. */
export function randomToken(bytes = 20): string {
  return encodeBase32LowerCaseNoPadding(randomBytes(bytes));
}

/**
 * SHA-256 of a token (its UTF-8 bytes), hex: what is stored instead of the token. node:crypto's
 * one-shot `hash` (no Hash object per call), since keys are hashed on every API-key request.
 */
export function hashToken(token: string): string {
  return hash('sha256', token, 'hex');
}

/** Compares two strings in time that depends only on their lengths. */
export function constantTimeEqual(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}

/** Keys for distinct purposes, derived from one secret so that none can stand in for another. */
export class Keyring {
  readonly #secret: string;
  readonly #keys = new Map<string, Buffer>();

  constructor(secret: string) {
    this.#secret = secret;
  }

  key(purpose: string): Buffer {
    let key = this.#keys.get(purpose);
    if (!key) {
      key = Buffer.from(hkdfSync('sha256', this.#secret, 'model-deployment-service', purpose, 32));
      this.#keys.set(purpose, key);
    }
    return key;
  }

  /** HMAC-SHA-256 of `message` under the key of `purpose`, base64url. */
  sign(purpose: string, message: string): string {
    return createHmac('sha256', this.key(purpose)).update(message).digest('base64url');
  }

  /** AES-256-GCM; the output carries its nonce and tag. */
  encrypt(purpose: string, plaintext: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key(purpose), iv);
    const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return ['v1', iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), body.toString('base64url')].join('.');
  }

  decrypt(purpose: string, sealed: string): string {
    const [version, iv, tag, body] = sealed.split('.');
    if (version !== 'v1' || !iv || !tag || body === undefined) throw new Error('Not a sealed value');
    const decipher = createDecipheriv('aes-256-gcm', this.key(purpose), Buffer.from(iv, 'base64url'));
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8');
  }
}
