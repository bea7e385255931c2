import { describe, expect, it } from 'vitest';
import { assertNewPassword, guessablePasswordReason, PASSWORD_MIN_SCORE } from '../../src/accounts/passwords.ts';
import { isAppError } from '../../src/errors.ts';

const EMAIL = 'Ada.Lovelace@Example.com';

/** The error `assertNewPassword` throws, or undefined when it accepts the password. */
function refusal(password: string, email = EMAIL) {
  try {
    assertNewPassword(password, email);
    return undefined;
  } catch (error) {
    if (!isAppError(error)) throw error;
    return { code: error.code, errors: error.errors };
  }
}

describe('the rules of a new password', () => {
  it.each(['password', '12345678', 'PassWord', 'QWERTY123', 'iloveyou', 'sunshine'])('refuses the common password %s, whatever its case', (password) => {
    expect(guessablePasswordReason(password, EMAIL)).toMatch(/commonly used/);
  });

  it.each(['ada.lovelace@example.com', 'ADA.LOVELACE@EXAMPLE.COM', 'ada.lovelace', 'Ada.Lovelace'])('refuses the account’s own email or its local part: %s', (password) => {
    expect(guessablePasswordReason(password, EMAIL)).toMatch(/email address/);
  });

  it.each(['correct horse battery staple', 'lovelace-analytical-1843', 'aaaaaaab-not-listed'])('accepts %s', (password) => {
    expect(guessablePasswordReason(password, EMAIL)).toBeNull();
  });

  it.each([
    ['aaaaaaaa', /Repeated characters/],
    ['abcdefgh', /sequences/],
    ['zxcvbnmasdf', /./],
    ['ada.lovelace!', /personal/],
  ])('refuses %s, which zxcvbn scores under 3, with its advice', (password, advice) => {
    const reason = guessablePasswordReason(password, EMAIL);
    expect(reason).toMatch(new RegExp(`^is too easy to guess \\(strength [0-2] of 4, at least ${PASSWORD_MIN_SCORE} needed\\)`));
    expect(reason).toMatch(advice);
  });

  it('answers 422 VALIDATION_FAILED at body/password, for the length as for the list', () => {
    expect(refusal('password')).toEqual({ code: 'VALIDATION_FAILED', errors: [{ location: 'body/password', message: expect.stringContaining('commonly used') }] });
    expect(refusal('ada.lovelace')).toEqual({ code: 'VALIDATION_FAILED', errors: [{ location: 'body/password', message: expect.stringContaining('email') }] });
    expect(refusal('short')).toEqual({ code: 'VALIDATION_FAILED', errors: [{ location: 'body/password', message: expect.stringContaining('8 to 72 bytes') }] });
    expect(refusal('€'.repeat(25))?.code).toBe('VALIDATION_FAILED');
    expect(refusal('correct horse battery staple')).toBeUndefined();
  });

  it('does not mistake an email without a local part for a rule', () => {
    expect(guessablePasswordReason('@example.com-long', '@example.com')).not.toMatch(/email address/);
    expect(guessablePasswordReason('anything-at-all-9', 'no-at-sign')).toBeNull();
  });
});
