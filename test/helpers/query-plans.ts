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

/**
 * The generic plan of a statement: the one a prepared statement keeps for every later run once
 * Postgres settles on it (after five runs, when it estimates it no dearer than planning each time;
 * the service prepares every read, src/db/prepared-client.ts). Prepared on `connection` and
 * explained as executed with `plan_cache_mode = force_generic_plan` (Postgres 15 has no
 * `EXPLAIN (GENERIC_PLAN)`). Bindings: numbers, strings, booleans, dates.
 */
export async function genericPlanOf(connection: pg.ClientBase, statement: Pick<Knex.Sql, 'sql' | 'bindings'>): Promise<PlanNode> {
  const literal = (value: unknown): string => {
    if (typeof value === 'number' || typeof value === 'boolean') return String(value);
    if (typeof value === 'string') return connection.escapeLiteral(value);
    if (value instanceof Date) return connection.escapeLiteral(value.toISOString());
    throw new Error(`no literal for the binding ${String(value)}`);
  };
  await connection.query(`prepare generic_plan_probe as ${statement.sql}`);
  try {
    await connection.query('set plan_cache_mode = force_generic_plan');
    const result = await connection.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
      `explain (format json) execute generic_plan_probe(${(statement.bindings as unknown[]).map(literal).join(', ')})`,
    );
    const [row] = result.rows;
    if (!row) throw new Error('no plan');
    return row['QUERY PLAN'][0].Plan;
  } finally {
    await connection.query('reset plan_cache_mode');
    await connection.query('deallocate generic_plan_probe');
  }
}
