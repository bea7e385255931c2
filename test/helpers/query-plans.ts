import type { Knex } from 'knex';
import type pg from 'pg';

/** A node of `EXPLAIN (FORMAT JSON)`, the fields the plan tests read. */
export interface PlanNode {
  'Node Type': string;
  'Parent Relationship'?: string;
  'Plan Rows': number;
  'Relation Name'?: string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

/** The node and every node under it. */
export function nodesOf(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodesOf)];
}

/** Every statement `run` sends, as knex sends it to pg (sql with $1 … placeholders, and its bindings). */
export async function statementsOf(db: Knex, run: () => Promise<unknown>): Promise<Knex.Sql[]> {
  const statements: Knex.Sql[] = [];
  const record = (query: Knex.Sql) => statements.push(query);
  db.on('query', record);
  try {
    await run();
  } finally {
    db.off('query', record);
  }
  return statements;
}

/** The plan of a statement knex sent (or would send), planned on a plain pg connection (which takes pg's own placeholders). */
export async function planOf(connection: pg.ClientBase, statement: Pick<Knex.Sql, 'sql' | 'bindings'>): Promise<PlanNode> {
  const result = await connection.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(`explain (format json) ${statement.sql}`, statement.bindings as unknown[]);
  const [row] = result.rows;
  if (!row) throw new Error('no plan');
  return row['QUERY PLAN'][0].Plan;
}
