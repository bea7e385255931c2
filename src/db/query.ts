/**
 * `FOR UPDATE OF <tables>`: locks only the rows of the tables named (objection hands the arguments
 * to knex; its typings only declare `forUpdate()` without them).
 */
export function forUpdateOf<Q extends { forUpdate(): Q }>(query: Q, ...tables: string[]): Q {
  return (query.forUpdate as (this: Q, ...tables: string[]) => Q).apply(query, tables);
}
