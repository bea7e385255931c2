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
 * (Reads through knex are prepared too, by the database's client, prepared-client.ts; this one also
 * skips knex's query runner, for the statements of every request.)
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
 * A `timestamptz` column selected `as` a name, in UTC text (`YYYY-MM-DD HH:MM:SS[.ffffff]`, Postgres's ISO DateStyle, as pg
 * itself reads times), for long lists: `isoTimes` turns it into the API's form. Parsing each time
 * into a Date (pg's regular expression) and writing it back cost more than the rest of a row, and
 * `to_char` in Postgres was slower still (15 ms for 8,000 times).
 */
export function utcTextSql(column: string, as: string): string {
  return `(${column} at time zone 'UTC')::text as ${as}`;
}

const UTC_TEXT = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,6})?$/;

/** A time `utcTextSql` read, as the API writes times: what `Date#toISOString()` makes of it. */
export function isoFromUtcText(text: string): string {
  if (!UTC_TEXT.test(text)) return new Date(`${text.replace(' ', 'T')}Z`).toISOString();
  const milliseconds = text.length > 20 ? text.slice(20, 23).padEnd(3, '0') : '000';
  return `${text.slice(0, 10)}T${text.slice(11, 19)}.${milliseconds}Z`;
}

/** Rewrites, in place, the `columns` of each row that `utcTextSql` read, as the API writes times. */
export function isoTimes<Row extends object>(rows: Row[], columns: ReadonlyArray<keyof Row & string>): Row[] {
  for (const row of rows) {
    const fields = row as Record<string, unknown>;
    for (const column of columns) if (typeof fields[column] === 'string') fields[column] = isoFromUtcText(fields[column]);
  }
  return rows;
}

/** A time as the API writes it, from a Date pg parsed or a string `isoTimes` wrote. */
export function isoTime(value: Date | string): string {
  return typeof value === 'string' ? value : value.toISOString();
}

/** Runs `deleteBatch` (deleting at most `limit` rows) until a batch comes back short; how many went in all. */
export async function deleteInBatches(deleteBatch: (limit: number) => Promise<number>, limit = 10_000): Promise<number> {
  let deleted = 0;
  for (;;) {
    const batch = await deleteBatch(limit);
    deleted += batch;
    if (batch < limit) return deleted;
  }
}

/** Runs `work` in the caller's transaction, or in a transaction of its own on a plain connection. */
export function inTransaction<T>(db: Knex | Knex.Transaction, work: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
  return (db as Knex.Transaction).isTransaction ? work(db as Knex.Transaction) : db.transaction(work);
}

/** Runs `work` in a read-only transaction that sees one snapshot of the database (repeatable read). */
export function readOnlySnapshot<T>(db: Knex, work: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
  return db.transaction(async (trx) => {
    await trx.raw('set transaction isolation level repeatable read, read only');
    return work(trx);
  });
}
