/**
 * True when a query failed on the unique index or constraint named `constraint` (Postgres 23505),
 * whether the error comes from knex as the driver raised it or wrapped by objection (`nativeError`).
 */
export function isUniqueViolation(error: unknown, constraint: string): boolean {
  const pg = ((error as { nativeError?: unknown } | undefined)?.nativeError ?? error) as { code?: string; constraint?: string } | undefined;
  return pg?.code === '23505' && pg.constraint === constraint;
}

/** SQLSTATEs and socket errors that say the database could not be reached or went away, not that it refused the data. */
const UNREACHABLE = new Set(['57P01', '57P02', '57P03', 'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH']);

/**
 * True when a query failed because the database was unreachable (down, restarting, the pool could
 * not get a connection): the same query may succeed later. False when the database refused it.
 */
export function isDatabaseUnreachable(error: unknown): boolean {
  const cause = ((error as { nativeError?: unknown } | undefined)?.nativeError ?? error) as { code?: string; name?: string; message?: string } | undefined;
  if (!cause) return false;
  if (cause.name === 'KnexTimeoutError') return true;
  if (cause.code && (cause.code.startsWith('08') || UNREACHABLE.has(cause.code))) return true;
  return !cause.code && /Connection terminated|connect ECONNREFUSED|Client was closed/i.test(cause.message ?? '');
}
