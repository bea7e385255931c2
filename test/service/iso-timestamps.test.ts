import knexFactory, { type Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isoTimestampSql } from '../../src/db/query.ts';
import { createTestDatabase } from '../helpers/database.ts';

/**
 * `isoTimestampSql` lets Postgres write times for long lists; it must write exactly what the API
 * writes for the same value through pg and `Date#toISOString()` (the single-item routes).
 */
let database: { url: string; drop(): Promise<void> };
let db: Knex;
beforeAll(async () => {
  database = await createTestDatabase();
  db = knexFactory({ client: 'pg', connection: database.url, pool: { min: 0, max: 1 } });
});
afterAll(async () => {
  await db.destroy();
  await database.drop();
});

describe('times written by Postgres', () => {
  it('are the strings Date#toISOString() makes of the parsed value, at every microsecond and in any session time zone', async () => {
    for (const zone of ['UTC', 'Asia/Kolkata', 'America/St_Johns']) {
      const rows = await db.transaction(async (trx) => {
        await trx.raw(`set local time zone '${zone}'`);
        const { rows } = await trx.raw<{ rows: Array<{ value: Date | null; iso: string | null }> }>(
          `select value, ${isoTimestampSql('value')} as iso
           from (select timestamptz '2026-11-25 21:47:25+00' + make_interval(secs => n * 0.000001 * 7919) as value from generate_series(0, 5000) n
                 union all values (timestamptz '2026-12-31 23:59:59.999999+00'), (timestamptz '2000-02-29 00:00:00.0005+05:30'), (null)) t`,
        );
        return rows;
      });
      expect(rows.filter((row) => (row.value?.toISOString() ?? null) !== row.iso)).toEqual([]);
      expect(rows).toHaveLength(5004);
    }
  });
});
