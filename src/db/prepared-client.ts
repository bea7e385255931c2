import { hash } from 'node:crypto';
import PostgresClient, { type KnexQuery } from 'knex/lib/dialects/postgres/index.js';
import type pg from 'pg';

type Connection = pg.Client & { __knex__disposed?: unknown };

/** Reads only: a write's plan is cheap next to its work, and its `returning *` would hold the table's columns. */
const READ = /^\s*(select|with)\b/i;

/** Named statements one connection keeps at most; its further reads run unnamed (planned each time). */
const MAX_STATEMENTS_PER_CONNECTION = 250;

/** Texts whose statement names are remembered (beyond, a name is hashed again on each use). */
const MAX_NAMED_TEXTS = 5_000;

/**
 * knex's Postgres client, with every read sent as a named statement (its name a hash of its text),
 * so Postgres parses and plans it once per connection: planning was most of a cheap read's time.
 * When a migration changes the columns a prepared `select *` returns, Postgres refuses it ("cached
 * plan must not change result type"): the read runs again unnamed and the connection is closed when
 * it goes back to the pool. Measurements and the pooler it needs:
 * docs/decisions/2026-11-26-every-read-is-a-prepared-statement.md.
 */
export class PreparingPostgresClient extends PostgresClient {
  override async _query(connection: Connection, query: KnexQuery): Promise<KnexQuery> {
    const name = query.options?.name === undefined && READ.test(query.sql) ? statementOn(connection, query.sql) : undefined;
    if (name === undefined) return super._query(connection, query);
    query.options = { ...query.options, name };
    try {
      return await super._query(connection, query);
    } catch (error) {
      if (!isStaleStatement(error)) throw error;
      connection.__knex__disposed = error;
      query.options = { ...query.options, name: undefined };
      return super._query(connection, query);
    }
  }
}

const statements = new WeakMap<Connection, Set<string>>();
const names = new Map<string, string>();

/** The name of `text`'s statement on this connection, or undefined when the connection keeps its maximum. */
function statementOn(connection: Connection, text: string): string | undefined {
  let name = names.get(text);
  if (name === undefined) {
    name = `k${hash('sha256', text, 'base64url').slice(0, 24)}`;
    if (names.size < MAX_NAMED_TEXTS) names.set(text, name);
  }
  let prepared = statements.get(connection);
  if (!prepared) statements.set(connection, (prepared = new Set()));
  if (prepared.has(name)) return name;
  if (prepared.size >= MAX_STATEMENTS_PER_CONNECTION) return undefined;
  prepared.add(name);
  return name;
}

function isStaleStatement(error: unknown): boolean {
  const { code, message } = error as { code?: string; message?: string };
  return code === '0A000' && /cached plan must not change result type/.test(message ?? '');
}
