/**
 * True when a query failed on the unique index or constraint named `constraint` (Postgres 23505),
 * whether the error comes from knex as the driver raised it or wrapped by objection (`nativeError`).
 */
export function isUniqueViolation(error: unknown, constraint: string): boolean {
  const pg = ((error as { nativeError?: unknown } | undefined)?.nativeError ?? error) as { code?: string; constraint?: string } | undefined;
  return pg?.code === '23505' && pg.constraint === constraint;
}
