import type { Knex } from 'knex';

/**
 * Email ownership (issue 17, point 1): `users.email_verified_at`, the single-use verification tokens
 * (stored as hashes, with the address each one proves), and one identity per provider per user.
 *
 * Backfill: an address is marked verified only where something already proved it. A user created by
 * SSO (no password, or an identity written in the same transaction as the user: the provider
 * asserted the email as verified), a user who registered through an invitation (its token came by
 * email; accepted in the same transaction as the user was created), and a user who completed a
 * password reset (its token came by email). Everyone else stays unverified until they confirm.
 *
 * Before this, one user could hold several subjects at one provider (the pre-hijack of the security
 * review). The oldest identity per user and provider is kept and the later ones are deleted, so the
 * unique constraint can hold; the person behind a deleted subject is refused at their next SSO
 * sign-in (409 `SSO_ACCOUNT_ALREADY_LINKED`) and must sign in another way.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table users add column email_verified_at timestamptz;

    update users u set email_verified_at = u.created_at
    where u.password_hash is null
       or exists (select 1 from user_identities i where i.user_id = u.id and i.created_at = u.created_at)
       or exists (
         select 1 from invitations inv
         where inv.invitee_user_id = u.id and inv.status = 'accepted' and inv.responded_at = u.created_at
       );

    update users u set email_verified_at = proof.used_at
    from (select user_id, min(used_at) as used_at from password_reset_tokens where used_at is not null group by user_id) proof
    where proof.user_id = u.id and u.email_verified_at is null;

    create table email_verification_tokens (
      id integer generated always as identity primary key,
      user_id integer not null references users (id) on delete cascade,
      -- The address the token proves (lower-cased), as it was when the token was sent.
      email text not null,
      token_hash text not null unique,
      expires_at timestamptz not null,
      used_at timestamptz,
      created_at timestamptz not null default now()
    );
    create index email_verification_tokens_user on email_verification_tokens (user_id) where used_at is null;

    delete from user_identities i
    using user_identities older
    where older.user_id = i.user_id and older.provider = i.provider
      and (older.created_at, older.id) < (i.created_at, i.id);
    alter table user_identities add constraint user_identities_user_provider_unique unique (user_id, provider);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table user_identities drop constraint user_identities_user_provider_unique;
    drop table email_verification_tokens;
    alter table users drop column email_verified_at;
  `);
}
