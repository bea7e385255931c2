/** knex's Postgres dialect, subclassed by src/db/prepared-client.ts (knex declares no types for its files). */
declare module 'knex/lib/dialects/postgres/index.js' {
  import type { Knex } from 'knex';

  /** What knex hands its dialect for one query: the SQL, its bindings, options merged into pg's query config. */
  export interface KnexQuery {
    sql: string;
    bindings?: unknown[];
    options?: Record<string, unknown>;
    response?: unknown;
  }

  class PostgresClient extends Knex.Client {
    _query(connection: unknown, query: KnexQuery): Promise<KnexQuery>;
  }
  export default PostgresClient;
}
