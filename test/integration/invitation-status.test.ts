import type { Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { InvitationStatus } from '../../src/db/models/invitations.ts';
import { createDatabase } from '../../src/db/database.ts';
import { lapsedSql, openSql, statusAt, statusSql } from '../../src/invitations/invitation-status.ts';
import { createTestDatabase } from '../helpers/database.ts';

describe('the invitation status rule in SQL', () => {
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

  it('reads every stored status and expiry as the TypeScript rule does', async () => {
    const statuses: InvitationStatus[] = ['pending', 'accepted', 'rejected', 'expired', 'revoked'];
    const offsets = ['-1 day', '-1 second', '0 seconds', '1 second', '1 day'];
    const { rows } = await db.raw<{ rows: Array<{ stored: InvitationStatus; expires_at: Date; now: Date; status: InvitationStatus; open: boolean; lapsed: boolean }> }>(`
      select i.status as stored, i.expires_at, now() as now, ${statusSql('i')} as status, ${openSql('i')} as open, ${lapsedSql('i')} as lapsed
      from unnest(?::text[]) as s(status) cross join unnest(?::interval[]) as o(offset_by)
      cross join lateral (select s.status, now() + o.offset_by as expires_at) as i
    `, [statuses, offsets]);
    expect(rows).toHaveLength(statuses.length * offsets.length);
    for (const row of rows) {
      const expected = statusAt({ status: row.stored, expires_at: row.expires_at }, row.now);
      expect(row.status, `${row.stored} expiring at ${row.expires_at.toISOString()}`).toBe(expected);
      expect(row.open).toBe(expected === 'pending');
      expect(row.lapsed).toBe(row.stored === 'pending' && expected === 'expired');
    }
  });
});
