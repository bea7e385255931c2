import type { Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BaseModel } from '../../src/db/base-model.ts';
import { createDatabase } from '../../src/db/database.ts';
import { createTestDatabase } from '../helpers/database.ts';

class Probe extends BaseModel {
  static override tableName = 'base_model_probe';
  declare id: number;
  declare display_name: string;
  declare updated_at: Date;
}

describe('the objection base model', () => {
  let db: Knex;
  let database: Awaited<ReturnType<typeof createTestDatabase>>;
  beforeAll(async () => {
    database = await createTestDatabase();
    db = createDatabase({ url: database.url, poolMax: 2 });
  });
  afterAll(async () => {
    await db.destroy();
    await database.drop();
  });

  it('reads and writes columns by their own names, and the baseline trigger keeps updated_at', async () => {
    await db.transaction(async (trx) => {
      await trx.raw(`
        create temporary table base_model_probe (
          id serial primary key,
          display_name text not null,
          updated_at timestamptz not null default now()
        ) on commit drop;
        create trigger base_model_probe_updated_at before update on base_model_probe
          for each row execute function set_updated_at();
      `);
      const longAgo = new Date('2020-01-01T00:00:00Z');
      const created = await Probe.query(trx).insert({ display_name: 'first', updated_at: longAgo }).returning('*');
      expect(created).toMatchObject({ display_name: 'first', updated_at: longAgo });
      expect(await trx('base_model_probe').where({ id: created.id }).first()).toMatchObject({ display_name: 'first' });

      const updated = await Probe.query(trx).patchAndFetchById(created.id, { display_name: 'second' });
      expect(updated.display_name).toBe('second');
      expect(updated.updated_at.getTime()).toBeGreaterThan(longAgo.getTime());
    });
  });

  it('is bound to no connection: a query names the knex or transaction it runs on', async () => {
    await expect(Probe.query().select('id')).rejects.toThrow(/no database connection/i);
  });
});
