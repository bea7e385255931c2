import type { Knex } from 'knex';

/**
 * Accounts: organizations, users, memberships, billing accounts, sessions, password-reset tokens,
 * the email outbox and rate-limit counters. Secrets are stored only as hashes (tokens) or sealed
 * with the server key (email bodies).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table organizations (
      id integer generated always as identity primary key,
      name text not null check (length(name) between 1 and 255),
      slug text not null unique,
      description text,
      status text not null default 'active',
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );

    create table users (
      id integer generated always as identity primary key,
      email text not null check (length(email) between 3 and 320),
      password_hash text,
      name text not null,
      first_name text,
      last_name text,
      country text,
      contact_number text,
      current_organization_id integer references organizations (id) on delete set null,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );
    create unique index users_email_unique on users (lower(email));

    create table memberships (
      id integer generated always as identity primary key,
      organization_id integer not null references organizations (id) on delete cascade,
      user_id integer not null references users (id) on delete cascade,
      role text not null check (role in ('viewer', 'member', 'admin', 'super_admin')),
      created_at timestamptz not null default now(),
      unique (organization_id, user_id)
    );
    create index memberships_user on memberships (user_id);

    create table billing_accounts (
      id integer generated always as identity primary key,
      organization_id integer not null unique references organizations (id) on delete cascade,
      account_type text not null default 'organization',
      currency text not null default 'usd',
      billing_mode text not null default 'postpaid',
      status text not null default 'active',
      processor_customer_id text unique,
      processor_subscription_id text unique,
      subscription_status text,
      collection_method text not null default 'charge_automatically'
        check (collection_method in ('charge_automatically', 'send_invoice')),
      current_period_start timestamptz,
      current_period_end timestamptz,
      auto_charge_enabled_at timestamptz,
      auto_charge_enabled_by_user_id integer references users (id) on delete set null,
      max_active_resources integer not null check (max_active_resources >= 0),
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );

    -- Lucia's design: the id is the SHA-256 of the token the browser holds.
    create table sessions (
      id text primary key,
      user_id integer not null references users (id) on delete cascade,
      organization_id integer references organizations (id) on delete set null,
      auth_method text not null,
      expires_at timestamptz not null,
      created_at timestamptz not null default now()
    );
    create index sessions_user on sessions (user_id);
    create index sessions_expires on sessions (expires_at);

    create table password_reset_tokens (
      id integer generated always as identity primary key,
      user_id integer not null references users (id) on delete cascade,
      token_hash text not null unique,
      expires_at timestamptz not null,
      used_at timestamptz,
      created_at timestamptz not null default now()
    );
    create index password_reset_tokens_user on password_reset_tokens (user_id);

    create table emails (
      id integer generated always as identity primary key,
      to_address text not null,
      subject text not null,
      template text not null,
      sealed_body text,
      status text not null default 'queued' check (status in ('queued', 'sent', 'failed')),
      attempts integer not null default 0,
      last_error text,
      sent_at timestamptz,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );

    create table rate_limits (
      key text primary key,
      window_started_at timestamptz not null,
      hits integer not null
    );
  `);
  for (const table of ['organizations', 'users', 'billing_accounts', 'emails']) {
    await knex.raw(`create trigger ${table}_updated_at before update on ${table} for each row execute function set_updated_at()`);
  }
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop table rate_limits, emails, password_reset_tokens, sessions, billing_accounts, memberships;
    alter table users drop constraint users_current_organization_id_fkey;
    drop table users, organizations;
  `);
}
