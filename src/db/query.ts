import type { Knex } from 'knex';
import type pg from 'pg';

/**
 * `FOR UPDATE OF <tables>`: locks only the rows of the tables named (objection hands the arguments
 * to knex; its typings only declare `forUpdate()` without them).
 */
export function forUpdateOf<Q extends { forUpdate(): Q }>(query: Q, ...tables: string[]): Q {
  return (query.forUpdate as (this: Q, ...tables: string[]) => Q).apply(query, tables);
}

/**
 * Runs `query` as a named prepared statement on its connection (the pool's, or the transaction's
 * when `db` is one): Postgres plans it once per connection, and after five runs keeps a generic
 * plan when that costs no more (partitions then pruned as it starts to execute). For a query of
 * constant text whose planning costs as much as its execution; `name` is its own, one per text.
 * Behind a pooler in transaction mode, this needs one that keeps prepared statements (PgBouncer
 * 1.21 or later, `max_prepared_statements`).
 */
export async function preparedRows<Row extends object>(db: Knex, name: string, query: Knex.Raw): Promise<Row[]> {
  const { sql, bindings } = query.toSQL().toNative();
  const connection = (await db.client.acquireConnection()) as pg.Client;
  try {
    return (await connection.query<Row>({ name, text: sql, values: bindings as unknown[] })).rows;
  } finally {
    await db.client.releaseConnection(connection);
  }
}

/**
 * A `timestamptz` column as the API writes times, made by Postgres: the same string as
 * `Date#toISOString()` of the value pg would parse (UTC, milliseconds truncated). For lists of
 * thousands of rows, where parsing each time into a Date and writing it back cost more than the
 * rest of the row.
 */
export function isoTimestampSql(column: string): string {
  return `to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
}

/** A time as the API writes it, from a Date pg parsed or a string `isoTimestampSql` made. */
export function isoTime(value: Date | string): string {
  return typeof value === 'string' ? value : value.toISOString();
}
