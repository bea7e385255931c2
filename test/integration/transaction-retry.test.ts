import type { Knex } from 'knex';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createDatabase } from '../../src/db/database.ts';
import { isTransactionConflict, retryingTransaction } from '../../src/db/transactions.ts';
import { createTestDatabase } from '../helpers/database.ts';
import { waitUntil } from '../helpers/net.ts';

let database: { url: string; drop(): Promise<void> };
let db: Knex;
/** Another session, in a transaction of its own: the one `work` collides with. */
let other: pg.Client;
let otherPid: number;

beforeAll(async () => {
  database = await createTestDatabase();
  db = createDatabase({ url: database.url, poolMax: 4 });
  await db.raw('create table retry_rows (id int primary key, value int not null)');
  other = new pg.Client({ connectionString: database.url });
  await other.connect();
  // Never the one to break a deadlock: the transaction under test is.
  await other.query("set deadlock_timeout = '10min'");
  otherPid = (await other.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid ?? 0;
});
afterAll(async () => {
  await other.end();
  await db.destroy();
  await database.drop();
});
beforeEach(async () => {
  await db.raw('truncate retry_rows');
  await db.raw('insert into retry_rows (id, value) values (1, 0), (2, 0)');
});

const lock = (trx: Knex.Transaction, id: number) => trx.raw('select id from retry_rows where id = ? for update', [id]);
const waitsForALock = async (pid: number) =>
  (await db.raw<{ rows: unknown[] }>("select 1 from pg_stat_activity where pid = ? and wait_event_type = 'Lock'", [pid])).rows.length === 1;

describe('retryingTransaction', () => {
  it('runs a transaction Postgres chose to break a real deadlock (40P01) again, and it commits', async () => {
    let runs = 0;
    const errors: unknown[] = [];
    await other.query('begin');
    await other.query('select id from retry_rows where id = 2 for update');
    let otherDone: Promise<unknown> = Promise.resolve();
    const result = await retryingTransaction(db, async (trx) => {
      runs += 1;
      await lock(trx, 1);
      if (runs === 1) {
        // The other session waits for row 1 (held here) while holding row 2, which this run takes
        // next: the cycle is closed by this run's wait, so its deadlock check breaks it.
        otherDone = other.query('select id from retry_rows where id = 1 for update').then(() => other.query('commit'));
        await waitUntil(() => waitsForALock(otherPid), 'the other session to wait for row 1');
        await trx.raw("set local deadlock_timeout = '50ms'");
      }
      await lock(trx, 2).catch((error: unknown) => {
        errors.push(error);
        throw error;
      });
      await trx('retry_rows').whereIn('id', [1, 2]).increment('value', 1);
      return runs;
    });
    await otherDone;
    expect(result).toBe(2);
    expect(errors.map((error) => (error as { code?: string }).code)).toEqual(['40P01']);
    expect(await db('retry_rows').orderBy('id').pluck('value')).toEqual([1, 1]);
  });

  it('runs a transaction that failed to serialize (40001) again, and it commits', async () => {
    let runs = 0;
    const result = await retryingTransaction(db, async (trx) => {
      runs += 1;
      await trx.raw('set transaction isolation level repeatable read');
      const [{ value }] = await trx('retry_rows').where({ id: 1 }).select('value');
      // Another session changes the row this snapshot read: updating it cannot be serialized.
      if (runs === 1) await other.query('update retry_rows set value = value + 100 where id = 1');
      await trx('retry_rows').where({ id: 1 }).update({ value: Number(value) + 1 });
      return runs;
    });
    expect(result).toBe(2);
    expect(await db('retry_rows').where({ id: 1 }).first('value')).toEqual({ value: 101 });
  });

  it('does not run a transaction again for any other error', async () => {
    for (const failure of [
      (trx: Knex.Transaction) => trx('retry_rows').insert({ id: 1, value: 0 }), // 23505
      (trx: Knex.Transaction) => trx.raw('select 1 / 0'), // 22012
      async () => {
        throw new Error('not the database');
      },
    ]) {
      let runs = 0;
      const outcome = await retryingTransaction(db, async (trx) => {
        runs += 1;
        await trx('retry_rows').where({ id: 2 }).increment('value', 1);
        await failure(trx);
      }).catch((error: unknown) => error);
      expect(outcome).toBeInstanceOf(Error);
      expect(isTransactionConflict(outcome)).toBe(false);
      expect(runs).toBe(1);
    }
    expect(await db('retry_rows').where({ id: 2 }).first('value')).toEqual({ value: 0 });
  });

  it('gives up after its attempts, throwing the conflict', async () => {
    let runs = 0;
    const outcome = await retryingTransaction(
      db,
      async (trx) => {
        runs += 1;
        await trx.raw("do $$ begin raise exception 'collides every time' using errcode = '40001'; end $$");
      },
      { attempts: 3 },
    ).catch((error: unknown) => error);
    expect(runs).toBe(3);
    expect(outcome).toMatchObject({ code: '40001', message: expect.stringMatching(/collides every time/) });
  });

  it('runs once, without retrying, inside a transaction the caller opened', async () => {
    let runs = 0;
    const outcome = await db
      .transaction((outer) =>
        retryingTransaction(outer, async () => {
          runs += 1;
          await outer.raw("do $$ begin raise exception 'conflict' using errcode = '40P01'; end $$");
        }),
      )
      .catch((error: unknown) => error);
    expect(runs).toBe(1);
    expect(isTransactionConflict(outcome)).toBe(true);
  });
});
