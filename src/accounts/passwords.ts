import { hash, verify, type Options } from '@node-rs/argon2';
import { ZxcvbnFactory } from '@zxcvbn-ts/core';
import { adjacencyGraphs, dictionary } from '@zxcvbn-ts/language-common';
import { dictionary as englishDictionary, translations } from '@zxcvbn-ts/language-en';
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

/** The bundled list of common passwords (about 49,000, zxcvbn-ts), lower-cased, loaded once. */
const COMMON_PASSWORDS: ReadonlySet<string> = new Set(dictionary['passwords-common'].map((password) => password.toLowerCase()));

/**
 * The lowest zxcvbn score (0 to 4) a new password must reach: 3, "safely unguessable", about 10^10
 * guesses, zxcvbn's own advice for a service that hashes slowly.
 */
export const PASSWORD_MIN_SCORE = 3;

/** zxcvbn-ts with its common and English dictionaries, keyboard graphs and English feedback, built once on first use. */
let strength: ZxcvbnFactory | undefined;
const strengthMeter = () =>
  (strength ??= new ZxcvbnFactory({ dictionary: { ...dictionary, ...englishDictionary }, graphs: adjacencyGraphs, translations }));

/**
 * What makes a password guessable whatever its length: being on the common-password list, being
 * the account's own email or the part of it before `@` (all compared case-insensitively), or a
 * zxcvbn score under PASSWORD_MIN_SCORE (repeats such as `aaaaaaaa`, sequences, keyboard walks,
 * dictionary words with common substitutions, the email's own words). Returns the reason, with
 * zxcvbn's feedback, or null when the password is acceptable.
 */
export function guessablePasswordReason(password: string, email: string): string | null {
  const candidate = password.toLowerCase();
  const address = email.trim().toLowerCase();
  const localPart = address.slice(0, Math.max(0, address.lastIndexOf('@')));
  if (candidate === address || (localPart && candidate === localPart)) return 'must not be your email address or its part before `@`';
  if (COMMON_PASSWORDS.has(candidate)) return 'is on a list of commonly used passwords; choose another';
  const { score, feedback } = strengthMeter().check(password, [address, localPart, ...localPart.split(/[^a-z0-9]+/)].filter(Boolean));
  if (score >= PASSWORD_MIN_SCORE) return null;
  const advice = [feedback.warning, ...feedback.suggestions].filter(Boolean).join(' ');
  return `is too easy to guess (strength ${score} of 4, at least ${PASSWORD_MIN_SCORE} needed)${advice ? `: ${advice}` : ''}`;
}

/** The rules of a new password: 8 to 72 bytes of UTF-8, not common, not the account's email, strong enough for zxcvbn. */
export function assertNewPassword(password: string, email: string, location = 'body/password'): void {
  assertPasswordLength(password, location);
  const reason = guessablePasswordReason(password, email);
  if (reason) throw new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', { errors: [{ location, message: reason }] });
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
