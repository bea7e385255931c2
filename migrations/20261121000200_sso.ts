import type { Knex } from 'knex';

/**
 * SSO: the identities users sign in with at an OpenID Connect provider. A user is found by the
 * provider's subject; the email is the one the provider last asserted (verified) for it.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table user_identities (
      id integer generated always as identity primary key,
      user_id integer not null references users (id) on delete cascade,
      provider text not null,
      subject text not null,
      email text not null,
      created_at timestamptz not null default now(),
      constraint user_identities_provider_subject_unique unique (provider, subject)
    );
    create index user_identities_user on user_identities (user_id);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop table user_identities');
}
