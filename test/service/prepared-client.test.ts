import type { Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase } from '../../src/db/database.ts';
import { createTestDatabase } from '../helpers/database.ts';

/** The service's knex client (src/db/prepared-client.ts): reads as named statements, on a real Postgres. */
let database: { url: string; drop(): Promise<void> };
let db: Knex;
beforeAll(async () => {
  database = await createTestDatabase();
  db = createDatabase({ url: database.url, poolMax: 1 });
  await db.raw('create table gadgets (id int primary key, name text not null)');
  await db('gadgets').insert([
    { id: 1, name: 'one' },
    { id: 2, name: 'two' },
  ]);
});
afterAll(async () => {
  await db.destroy();
  await database.drop();
});

/** The statements the service's single connection has prepared. */
async function prepared(): Promise<string[]> {
  const { rows } = await db.raw<{ rows: Array<{ statement: string }> }>('select statement from pg_prepared_statements order by prepare_time');
  return rows.map((row) => row.statement);
}

describe('the prepared-statement client', () => {
  it('prepares each read once per connection and runs it again by name; writes and other texts are not prepared', async () => {
    const byId = (id: number) => db('gadgets').where({ id }).first();
    expect(await byId(1)).toEqual({ id: 1, name: 'one' });
    expect(await byId(2)).toEqual({ id: 2, name: 'two' });
    await db('gadgets').where({ id: 2 }).update({ name: 'deux' });
    expect(await db('gadgets').whereIn('id', [1, 2]).orderBy('id').pluck('name')).toEqual(['one', 'deux']);
    const statements = await prepared();
    expect(statements.filter((text) => /"gadgets" where "id" = \$1 limit \$2/.test(text))).toHaveLength(1);
    expect(statements.filter((text) => /"id" in \(\$1, \$2\)/.test(text))).toHaveLength(1);
    expect(statements.filter((text) => /^update/i.test(text))).toEqual([]);
  });

  it('runs a prepared select * again after a migration changed its columns, with the new columns', async () => {
    const all = () => db('gadgets').select('*').orderBy('id');
    expect(await all()).toEqual([
      { id: 1, name: 'one' },
      { id: 2, name: 'deux' },
    ]);
    await db.raw("alter table gadgets add column colour text not null default 'grey'");
    expect(await all()).toEqual([
      { id: 1, name: 'one', colour: 'grey' },
      { id: 2, name: 'deux', colour: 'grey' },
    ]);
    // The connection holding the stale statement was replaced: the next one prepares afresh.
    expect(await all()).toHaveLength(2);
    expect((await prepared()).filter((text) => /select \* from "gadgets"/.test(text))).toHaveLength(1);
  });

  it('reports a read that fails for another reason as it is', async () => {
    await expect(db('no_such_table').select('*')).rejects.toMatchObject({ code: '42P01' });
    expect(await db('gadgets').count({ n: '*' })).toEqual([{ n: '2' }]);
  });
});
