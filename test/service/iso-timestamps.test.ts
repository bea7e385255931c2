import knexFactory, { type Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isoTimes, utcTextSql } from '../../src/db/query.ts';
import { createTestDatabase } from '../helpers/database.ts';

/**
 * Long lists read times as UTC text (`utcTextSql`) and write them with `isoTimes`: exactly what the
 * API writes for the same value through pg and `Date#toISOString()` (the single-item routes).
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

describe('times read as UTC text', () => {
  it('are written as Date#toISOString() writes the parsed value, at any fraction of a second and in any session time zone', async () => {
    for (const zone of ['UTC', 'Asia/Kolkata', 'America/St_Johns']) {
      const rows = await db.transaction(async (trx) => {
        await trx.raw(`set local time zone '${zone}'`);
        const { rows } = await trx.raw<{ rows: Array<{ value: Date | null; iso: string | null }> }>(
          `select value, ${utcTextSql('value', 'iso')}
           from (select timestamptz '2026-11-25 21:47:25+00' + make_interval(secs => n * 0.000001 * 7919) as value from generate_series(0, 5000) n
                 union all values (timestamptz '2026-12-31 23:59:59.999999+00'), (timestamptz '2000-02-29 00:00:00.0005+05:30'), (timestamptz '0099-01-01 00:00:00.5+00'), (null)) t`,
        );
        return isoTimes(rows, ['iso']);
      });
      expect(rows.filter((row) => (row.value?.toISOString() ?? null) !== row.iso)).toEqual([]);
      expect(rows).toHaveLength(5005);
    }
  });
});
