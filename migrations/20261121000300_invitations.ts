import type { Knex } from 'knex';

/**
 * Invitations to organizations. The token is stored only as its hash; at most one pending invitation
 * per organization and email. Emails record the invitation they belong to, so an invitation's
 * delivery status is read from its emails rather than copied.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table invitations (
      id integer generated always as identity primary key,
      organization_id integer not null references organizations (id) on delete cascade,
      invitee_email text not null check (length(invitee_email) between 3 and 320),
      invitee_user_id integer references users (id) on delete set null,
      invited_by_user_id integer not null references users (id) on delete cascade,
      role text not null check (role in ('viewer', 'member', 'admin')),
      status text not null default 'pending' check (status in ('pending', 'accepted', 'rejected', 'expired', 'revoked')),
      token_hash text not null unique,
      expires_at timestamptz not null,
      responded_at timestamptz,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );
    create unique index invitations_one_pending on invitations (organization_id, invitee_email) where status = 'pending';
    create index invitations_invitee on invitations (invitee_email) where status = 'pending';
    create index invitations_organization on invitations (organization_id, created_at desc);
    create index invitations_expiry on invitations (expires_at) where status = 'pending';
    create trigger invitations_updated_at before update on invitations for each row execute function set_updated_at();

    alter table emails add column invitation_id integer references invitations (id) on delete set null;
    create index emails_invitation on emails (invitation_id, id desc) where invitation_id is not null;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('alter table emails drop column invitation_id; drop table invitations;');
}
