import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import type { SessionPrincipal } from '../accounts/principal.ts';
import { notBlank } from '../accounts/accounts.service.ts';
import { AppError } from '../errors.ts';

type Organization = components['schemas']['Organization'];
type Member = components['schemas']['Member'];
type UpdateOrganizationRequest = components['schemas']['UpdateOrganizationRequest'];

/** The caller's current organization and its members. Roles are checked before these run. */
export class OrganizationsService {
  readonly #db: Knex;

  constructor(db: Knex) {
    this.#db = db;
  }

  async get(principal: SessionPrincipal): Promise<Organization> {
    const { id } = requireOrganization(principal);
    const row = await this.#db('organizations').where({ id }).first();
    if (!row) throw new AppError('NOT_FOUND', 'Your organization no longer exists.');
    return toOrganization(row, principal);
  }

  async update(principal: SessionPrincipal, input: UpdateOrganizationRequest): Promise<Organization> {
    const { id } = requireOrganization(principal);
    const changes: Record<string, string | null> = {};
    if (input.name !== undefined) changes.name = notBlank(input.name, 'body/name');
    if (input.description !== undefined) changes.description = input.description;
    const [row] = Object.keys(changes).length
      ? await this.#db('organizations').where({ id }).update(changes).returning('*')
      : await this.#db('organizations').where({ id }).select('*');
    if (!row) throw new AppError('NOT_FOUND', 'Your organization no longer exists.');
    return toOrganization(row, principal);
  }

  async members(principal: SessionPrincipal): Promise<Member[]> {
    const { id } = requireOrganization(principal);
    const rows = await this.#db('memberships as m')
      .join('users as u', 'u.id', 'm.user_id')
      .where('m.organization_id', id)
      .orderBy([{ column: 'm.created_at' }, { column: 'm.id' }])
      .select('m.id', 'm.user_id', 'u.email', 'u.name', 'm.role', 'm.created_at');
    return rows.map((row) => ({
      id: row.id,
      user_id: row.user_id,
      email: row.email,
      name: row.name,
      role: row.role,
      joined_at: row.created_at.toISOString(),
    }));
  }
}

export function requireOrganization(principal: SessionPrincipal): { id: number; name: string } {
  if (!principal.organization) throw new AppError('FORBIDDEN', 'You have no organization yet: complete your profile first.');
  return principal.organization;
}

function toOrganization(row: Record<string, unknown>, principal: SessionPrincipal): Organization {
  return {
    id: row.id as number,
    name: row.name as string,
    slug: row.slug as string,
    description: (row.description as string | null) ?? null,
    status: row.status as string,
    role: principal.role ?? 'viewer',
    created_at: (row.created_at as Date).toISOString(),
    updated_at: (row.updated_at as Date).toISOString(),
  };
}
