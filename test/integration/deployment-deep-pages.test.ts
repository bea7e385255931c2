import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DAY_BUCKET_FROM_OFFSET, transferDeployments, type Scope } from '../../src/deployments/deployments.repository.ts';
import { registeredUser } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import { team } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import type { Api } from '../helpers/browser.ts';
import { createTestDatabase } from '../helpers/database.ts';

/**
 * Deep pages of `GET /api/v1/model-deployments` by `offset` start from `deployment_day_counts` (the
 * owner's deployments per UTC day) instead of stepping over `offset` index entries. They must be the
 * pages the plain `order by created_at desc, id desc offset … limit …` gives: across day boundaries,
 * at rows exactly at UTC midnight and a microsecond before it, among rows sharing one instant, after
 * deletes, owner transfers and a truncate, and past the end.
 *
 * Neither side works in UTC here: the app's sessions read in READ_ZONE (the database's default), and
 * the rows are written by sessions in WRITE_ZONE, whose dates differ from UTC's and from each other's
 * for part of every day. A day taken from either session's zone, on either side, moves rows near
 * midnight to another day than the one the read's range assumes, and these pages come out shifted.
 */
const READ_ZONE = 'America/St_Johns';
const WRITE_ZONE = 'Pacific/Kiritimati';

let app: TestApp;
beforeAll(async () => {
  const database = await createTestDatabase();
  const admin = new pg.Client({ connectionString: database.url });
  await admin.connect();
  await admin.query(`alter database ${admin.escapeIdentifier(new URL(database.url).pathname.slice(1))} set timezone = '${READ_ZONE}'`);
  await admin.end();
  app = await startTestApp({}, { database });
});
afterAll(() => app.close());

const list = (api: Api, query: { limit?: number; offset?: number }) => api.GET('/api/v1/model-deployments', { params: { query } });

/** An owner with the API it lists through and its scope. */
interface Owner {
  api: Api;
  scope: Scope;
}

async function ownerOf(user: Awaited<ReturnType<typeof registeredUser>>): Promise<Owner> {
  const organization = (await user.api.GET('/v1/organization')).data;
  if (!organization) throw new Error('no organization');
  return { api: user.api, scope: { userId: Number(user.user.id), organizationId: Number(organization.id) } };
}

/**
 * Deployment times (Postgres text, UTC) over `days` days before `end`: a different number each day,
 * some days none, three rows at exactly midnight (sharing that instant), one a microsecond before
 * the next midnight, and on some days two sharing noon.
 */
function history(days: number, end = '2026-11-01', seed = 0): string[] {
  const times: string[] = [];
  const last = Date.parse(`${end}T00:00:00Z`);
  for (let k = 1; k <= days; k++) {
    if ((k + seed) % 9 === 4) continue;
    const day = new Date(last - k * 86_400_000).toISOString().slice(0, 10);
    const count = 5 + (((k + seed) * 37) % 71);
    for (let i = 1; i <= count; i++) {
      const second = Math.floor((i * 86_399) / (count + 1));
      const clock = [Math.floor(second / 3600), Math.floor(second / 60) % 60, second % 60].map((n) => String(n).padStart(2, '0')).join(':');
      times.push(`${day} ${clock}.${String((i * 7919) % 1_000_000).padStart(6, '0')}+00`);
    }
    times.push(`${day} 00:00:00+00`, `${day} 00:00:00+00`, `${day} 00:00:00+00`, `${day} 23:59:59.999999+00`);
    if ((k + seed) % 4 === 0) times.push(`${day} 12:00:00+00`, `${day} 12:00:00+00`);
  }
  return times;
}

/** Stores deployments of `owner` created at `times`, in one statement of a session in WRITE_ZONE. */
async function insertAt(scope: Scope, times: string[]): Promise<void> {
  await app.db.transaction(async (trx) => {
    await trx.raw(`set local timezone = '${WRITE_ZONE}'`);
    await trx.raw(
      `insert into deployments (user_id, organization_id, deployable_model_id, model_name, model_format, model_size_in_billions, quantization, model_engine,
                                status, created_at, status_changed_at, terminated_at)
       select ?, ?, m.id, m.model_name, 'pytorch', 0.5, 'none', 'vLLM', 'terminated', t, t, t
       from unnest(?::timestamptz[]) t cross join (select id, model_name from deployable_models where model_name = 'qwen2.5-instruct' limit 1) m`,
      [scope.userId, scope.organizationId, times],
    );
  });
}

/** The owner's deployments as the plain ORDER BY gives them: ids, and each one's UTC day. */
async function plainOrder(scope: Scope): Promise<Array<{ id: string; day: string }>> {
  const { rows } = await app.db.raw<{ rows: Array<{ id: string; day: string }> }>(
    `select id, to_char(created_at at time zone 'UTC', 'YYYY-MM-DD') as day from deployments
     where user_id = ? and organization_id = ? order by created_at desc, id desc`,
    [scope.userId, scope.organizationId],
  );
  return rows;
}

/** Offsets on both sides of every day boundary of the list (and 0, the threshold's neighbours, the end and past it). */
function boundaryOffsets(ordered: ReadonlyArray<{ day: string }>): number[] {
  const offsets = new Set([0, DAY_BUCKET_FROM_OFFSET - 1, DAY_BUCKET_FROM_OFFSET, DAY_BUCKET_FROM_OFFSET + 1]);
  for (let i = 1; i < ordered.length; i++) {
    if (ordered[i]?.day !== ordered[i - 1]?.day && i >= DAY_BUCKET_FROM_OFFSET - 1) for (const offset of [i - 1, i, i + 1]) offsets.add(offset);
  }
  for (const offset of [ordered.length - 1, ordered.length, ordered.length + 1, 2_147_483_647]) offsets.add(offset);
  return [...offsets].filter((offset) => offset >= 0).sort((a, b) => a - b);
}

/** Every page at `offsets` equals the plain ORDER BY … OFFSET … LIMIT of the owner's deployments now. */
async function expectPlainPages(owner: Owner, offsets: readonly number[], limit: number): Promise<void> {
  const ordered = (await plainOrder(owner.scope)).map((row) => row.id);
  for (const offset of offsets) {
    const { data, error } = await list(owner.api, { offset, limit });
    if (!data) throw new Error(JSON.stringify(error));
    expect({ offset, ids: data.items.map((d) => d.id), more: data.next_cursor !== null, total: data.total }).toEqual({
      offset,
      ids: ordered.slice(offset, offset + limit),
      more: offset + limit < ordered.length,
      total: ordered.length,
    });
  }
}

/** Rows of `deployment_day_counts` (and of `deployment_counts`) that differ from a count of `deployments` (a kept 0 is no row). */
async function countsOffRecount(): Promise<{ days: unknown[]; owners: unknown[] }> {
  const { rows: days } = await app.db.raw<{ rows: unknown[] }>(
    `select user_id, organization_id, day::text, r.deployments as recounted, c.deployments as counted
     from (select user_id, organization_id, (created_at at time zone 'UTC')::date as day, count(*)::int as deployments from deployments group by 1, 2, 3) r
     full join deployment_day_counts c using (user_id, organization_id, day)
     where c.deployments is distinct from r.deployments and not (r.deployments is null and c.deployments = 0)`,
  );
  const { rows: owners } = await app.db.raw<{ rows: unknown[] }>(
    `select user_id, organization_id, r.deployments as recounted, c.deployments as counted
     from (select user_id, organization_id, count(*) as deployments from deployments group by 1, 2) r
     full join deployment_counts c using (user_id, organization_id)
     where c.deployments is distinct from r.deployments and not (r.deployments is null and c.deployments = 0)`,
  );
  return { days, owners };
}

describe('deep pages by offset', () => {
  let owner: Owner;
  beforeAll(async () => {
    owner = await ownerOf(await registeredUser(app));
    await deployment(app, { api: owner.api }, 'requested');
    await insertAt(owner.scope, history(60));
  });

  it('run where neither the reading nor the writing session is in UTC', async () => {
    expect((await app.db.raw<{ rows: Array<{ TimeZone: string }> }>('show timezone')).rows[0]?.TimeZone).toBe(READ_ZONE);
    const ordered = await plainOrder(owner.scope);
    // Enough rows that most day boundaries lie past the threshold, where the page starts from the day counts.
    expect(ordered.length).toBeGreaterThan(DAY_BUCKET_FROM_OFFSET + 1_000);
  });

  it('equal the plain ORDER BY … OFFSET on both sides of every day boundary, at midnight, among ties, and past the end', async () => {
    const offsets = boundaryOffsets(await plainOrder(owner.scope));
    expect(offsets.length).toBeGreaterThan(60);
    await expectPlainPages(owner, offsets, 3);
    await expectPlainPages(owner, [DAY_BUCKET_FROM_OFFSET, DAY_BUCKET_FROM_OFFSET + 777], 100);
  });

  it('answer an offset past the end with an empty page, the exact total and no cursor', async () => {
    const total = (await plainOrder(owner.scope)).length;
    for (const offset of [total, total + 1, 2_147_483_647]) {
      const { data } = await list(owner.api, { offset, limit: 10 });
      expect(data).toMatchObject({ items: [], total, offset, next_cursor: null });
    }
  });

  it('start from the day counts: a count one too high moves every deeper page by one', async () => {
    const ordered = await plainOrder(owner.scope);
    const newestSeededDay = ordered.find((row, i) => i > 0 && row.day !== ordered[0]?.day)?.day;
    if (!newestSeededDay) throw new Error('no seeded day');
    const offset = DAY_BUCKET_FROM_OFFSET + 500;
    await app.db('deployment_day_counts').where({ user_id: owner.scope.userId, organization_id: owner.scope.organizationId, day: newestSeededDay }).increment('deployments', 1);
    try {
      const { data } = await list(owner.api, { offset, limit: 3 });
      expect(data?.items.map((d) => d.id)).toEqual(ordered.slice(offset - 1, offset + 2).map((row) => row.id));
    } finally {
      await app.db('deployment_day_counts').where({ user_id: owner.scope.userId, organization_id: owner.scope.organizationId, day: newestSeededDay }).decrement('deployments', 1);
    }
    await expectPlainPages(owner, [offset], 3);
  });

  it('stay exact after deletes: a whole day, the rows at midnight, and every seventh row', async () => {
    const ordered = await plainOrder(owner.scope);
    const someDay = ordered[Math.floor(ordered.length / 2)]?.day ?? '';
    await app.db.transaction(async (trx) => {
      await trx.raw(`set local timezone = '${WRITE_ZONE}'`);
      await trx.raw(`delete from deployments where user_id = ? and (created_at at time zone 'UTC')::date = ?::date`, [owner.scope.userId, someDay]);
      await trx.raw(`delete from deployments where user_id = ? and created_at = date_trunc('day', created_at, 'UTC') and created_at < '2026-10-01'`, [owner.scope.userId]);
      await trx('deployments').whereIn('id', ordered.filter((_, i) => i % 7 === 3).map((row) => row.id)).delete();
    });
    expect(await countsOffRecount()).toEqual({ days: [], owners: [] });
    await expectPlainPages(owner, boundaryOffsets(await plainOrder(owner.scope)), 3);
  });

  it('stay exact when rows move to another day: midnight rows a microsecond back, others a day back', async () => {
    await app.db.transaction(async (trx) => {
      await trx.raw(`set local timezone = '${WRITE_ZONE}'`);
      await trx.raw(`update deployments set created_at = created_at - interval '1 microsecond' where user_id = ? and created_at = date_trunc('day', created_at, 'UTC')`, [owner.scope.userId]);
      await trx.raw(`update deployments set created_at = created_at - interval '1 day' where user_id = ? and extract(second from created_at) < 10`, [owner.scope.userId]);
    });
    expect(await countsOffRecount()).toEqual({ days: [], owners: [] });
    await expectPlainPages(owner, boundaryOffsets(await plainOrder(owner.scope)), 3);
  });
});

describe('deep pages after an owner transfer and a truncate', () => {
  it('are the heir’s merged list once a removed member’s deployments pass to the admin who removed them', async () => {
    const members = await team(app);
    const admin = await ownerOf(members.admin);
    const member = await ownerOf(members.member);
    await insertAt(admin.scope, history(40, '2026-11-01', 1));
    await insertAt(member.scope, history(40, '2026-10-20', 2));
    expect(await countsOffRecount()).toEqual({ days: [], owners: [] });
    const removed = await members.admin.api.DELETE('/v1/organization/members/{user_id}', { params: { path: { user_id: members.member.user.id } } });
    expect(removed.response.status).toBe(204);
    expect(await countsOffRecount()).toEqual({ days: [], owners: [] });
    const ordered = await plainOrder(admin.scope);
    expect(ordered.length).toBeGreaterThan(DAY_BUCKET_FROM_OFFSET + 1_000);
    await expectPlainPages(admin, boundaryOffsets(ordered), 3);
  });

  it('count a transfer of many rows right after one-row updates on the same connection (the triggers’ plans kept for one row)', async () => {
    const from = await ownerOf(await registeredUser(app));
    const to = await ownerOf(await registeredUser(app));
    await insertAt(from.scope, history(30));
    const ids = (await plainOrder(from.scope)).map((row) => row.id);
    await app.db.transaction(async (trx) => {
      for (const id of ids.slice(0, 8)) await trx('deployments').where({ id }).update({ status_changed_at: trx.fn.now() });
      await transferDeployments(trx, { organizationId: from.scope.organizationId, fromUserId: from.scope.userId, toUserId: to.scope.userId });
    });
    expect(await countsOffRecount()).toEqual({ days: [], owners: [] });
    expect((await plainOrder({ userId: to.scope.userId, organizationId: from.scope.organizationId })).length).toBe(ids.length);
  });

  it('are empty after a truncate, and exact again for rows inserted after it', async () => {
    const owner = await ownerOf(await registeredUser(app));
    await insertAt(owner.scope, history(50));
    await app.db.raw('truncate deployments cascade');
    expect(await app.db('deployment_day_counts').count({ n: '*' })).toEqual([{ n: '0' }]);
    expect(await countsOffRecount()).toEqual({ days: [], owners: [] });
    await expectPlainPages(owner, [0, DAY_BUCKET_FROM_OFFSET, DAY_BUCKET_FROM_OFFSET + 100], 3);
    await insertAt(owner.scope, history(50, '2026-12-01'));
    // A few single rows too: each insert statement adds its own day once.
    for (const time of ['2026-12-01 00:00:00+00', '2026-11-30 23:59:59.999999+00', '2026-12-01 00:00:00+00']) await insertAt(owner.scope, [time]);
    expect(await countsOffRecount()).toEqual({ days: [], owners: [] });
    await expectPlainPages(owner, boundaryOffsets(await plainOrder(owner.scope)), 3);
  });
});
