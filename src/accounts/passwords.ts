import { hash, verify, type Options } from '@node-rs/argon2';
import { AppError } from '../errors.ts';

/** argon2id with OWASP's minimum parameters (m=19456 KiB, t=2, p=1). */
const ARGON2ID: Options = { algorithm: 2 /* Argon2id */, memoryCost: 19_456, timeCost: 2, parallelism: 1 };

export const PASSWORD_MIN_BYTES = 8;
export const PASSWORD_MAX_BYTES = 72;

/** The schema bounds characters; the rule is 8 to 72 bytes of UTF-8. */
export function assertPasswordLength(password: string, location = 'body/password'): void {
  const bytes = Buffer.byteLength(password, 'utf8');
  if (bytes < PASSWORD_MIN_BYTES || bytes > PASSWORD_MAX_BYTES) {
    throw new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', {
      errors: [{ location, message: `must be ${PASSWORD_MIN_BYTES} to ${PASSWORD_MAX_BYTES} bytes in UTF-8 (is ${bytes})` }],
    });
  }
}

export function hashPassword(password: string): Promise<string> {
  return hash(password, ARGON2ID);
}

/** A hash of no one's password, verified when there is no account so failures cost the same time. */
const decoy = hash('decoy password that matches nothing', ARGON2ID);

/** Verifies `password` against `passwordHash`, or against a decoy (always false) when there is none. */
export async function verifyPassword(passwordHash: string | null | undefined, password: string): Promise<boolean> {
  if (!passwordHash) {
    await verify(await decoy, password);
    return false;
  }
  return verify(passwordHash, password);
}
