import { AppError } from './errors.ts';

/** Emails are compared case-insensitively and stored trimmed and lower-cased. */
export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase();
}

/** The value trimmed; 422 at `location` when nothing is left. */
export function notBlank(value: string, location: string): string {
  const trimmed = value.trim();
  if (!trimmed) {
    throw new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', { errors: [{ location, message: 'must not be blank' }] });
  }
  return trimmed;
}
