import type { Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase } from '../../src/db/database.ts';
import { createTestDatabase } from '../helpers/database.ts';

const MIGRATION = '20261123000100_email_verification.ts';

let database: Awaited<ReturnType<typeof createTestDatabase>>;
let db: Knex;
beforeAll(async () => {
  database = await createTestDatabase();
  db = createDatabase({ url: database.url, poolMax: 2 });
});
afterAll(async () => {
  await db?.destroy();
  await database?.drop();
});

const at = (minutes: number) => new Date(Date.UTC(2026, 10, 1, 9, minutes));

async function user(email: string, createdAt: Date, passwordHash: string | null = '$argon2id$stand-in'): Promise<number> {
  const [row] = await db('users').insert({ email, name: email, password_hash: passwordHash, created_at: createdAt }).returning('id');
  return (row as { id: number }).id;
}

describe(`migration ${MIGRATION}`, () => {
  it('marks verified only the addresses already proven, and keeps one identity per provider per user', async () => {
    await db.migrate.down({ name: MIGRATION });

    const ssoCreated = await user('sso-created@example.com', at(1), null);
    await db('user_identities').insert({ user_id: ssoCreated, provider: 'google', subject: 'sub-created', email: 'sso-created@example.com', created_at: at(1) });
    // A password account an SSO identity was linked to later: the link proved nothing about the account.
    const linkedLater = await user('linked-later@example.com', at(2));
    await db('user_identities').insert({ user_id: linkedLater, provider: 'google', subject: 'sub-linked', email: 'linked-later@example.com', created_at: at(30) });

    const inviter = await user('inviter@example.com', at(0));
    const [organization] = await db('organizations').insert({ name: 'Org', slug: 'org-migration' }).returning('id');
    const invitation = (invitee: string, userId: number, respondedAt: Date, hash: string) => ({
      organization_id: (organization as { id: number }).id,
      invitee_email: invitee,
      invitee_user_id: userId,
      invited_by_user_id: inviter,
      role: 'member',
      status: 'accepted',
      token_hash: hash,
      expires_at: at(59),
      responded_at: respondedAt,
    });
    const joinedByInvitation = await user('joined@example.com', at(3));
    await db('invitations').insert(invitation('joined@example.com', joinedByInvitation, at(3), 'hash-1'));
    // Accepted later, by token or by id: the data cannot tell which, so it stays unverified.
    const acceptedLater = await user('accepted-later@example.com', at(4));
    await db('invitations').insert(invitation('accepted-later@example.com', acceptedLater, at(40), 'hash-2'));

    const reset = await user('reset@example.com', at(5));
    await db('password_reset_tokens').insert([
      { user_id: reset, token_hash: 'reset-used', expires_at: at(59), used_at: at(50) },
      { user_id: reset, token_hash: 'reset-unused', expires_at: at(59) },
    ]);
    const plain = await user('plain@example.com', at(6));
    const requestedOnly = await user('requested-only@example.com', at(7));
    await db('password_reset_tokens').insert({ user_id: requestedOnly, token_hash: 'never-used', expires_at: at(59) });

    const twoSubjects = await user('two-subjects@example.com', at(8));
    await db('user_identities').insert([
      { user_id: twoSubjects, provider: 'google', subject: 'sub-first', email: 'two-subjects@example.com', created_at: at(10) },
      { user_id: twoSubjects, provider: 'google', subject: 'sub-second', email: 'two-subjects@example.com', created_at: at(20) },
      { user_id: twoSubjects, provider: 'other', subject: 'sub-other', email: 'two-subjects@example.com', created_at: at(25) },
    ]);

    await db.migrate.up({ name: MIGRATION });

    const verified = Object.fromEntries(
      (await db('users').select('id', 'email_verified_at')).map((row: { id: number; email_verified_at: Date | null }) => [row.id, row.email_verified_at]),
    );
    expect(verified[ssoCreated]).toEqual(at(1));
    expect(verified[joinedByInvitation]).toEqual(at(3));
    expect(verified[reset]).toEqual(at(50));
    for (const id of [linkedLater, acceptedLater, plain, requestedOnly, inviter, twoSubjects]) expect(verified[id], `user ${id}`).toBeNull();

    expect(await db('user_identities').where({ user_id: twoSubjects }).orderBy('subject').pluck('subject')).toEqual(['sub-first', 'sub-other']);
    await expect(
      db('user_identities').insert({ user_id: twoSubjects, provider: 'google', subject: 'sub-third', email: 'two-subjects@example.com' }),
    ).rejects.toMatchObject({ code: '23505', constraint: 'user_identities_user_provider_unique' });
  });
});
