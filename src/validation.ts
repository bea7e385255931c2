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

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A UUID in its canonical text form (deployment ids); Postgres would refuse anything else as `uuid`. */
export function isUuid(value: string): boolean {
  return UUID.test(value);
}
