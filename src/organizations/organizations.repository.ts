import type { Knex } from 'knex';
import { randomToken } from '../crypto.ts';

export interface NewOrganization {
  id: number;
  name: string;
  slug: string;
}

/** A URL-safe slug of a name: lower-case ASCII letters, digits and single dashes. */
export function slugify(name: string): string {
  const slug = name
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 48)
    .replace(/-+$/g, '');
  return slug || 'organization';
}

/**
 * Creates an organization with its owner (`super_admin`) and its billing account, and makes it the
 * owner's current organization, in the caller's transaction. A taken slug gets a random suffix.
 */
export async function createOrganizationWithOwner(
  trx: Knex.Transaction,
  input: { name: string; ownerId: number; maxActiveResources: number },
): Promise<NewOrganization> {
  const base = slugify(input.name);
  const taken = await trx('organizations').where('slug', base).first('id');
  const slug = taken ? `${base}-${randomToken(5).slice(0, 6)}` : base;
  const [organization] = await trx('organizations').insert({ name: input.name, slug }).returning(['id', 'name', 'slug']);
  if (!organization) throw new Error('organization insert returned nothing');
  await trx('memberships').insert({ organization_id: organization.id, user_id: input.ownerId, role: 'super_admin' });
  await trx('billing_accounts').insert({ organization_id: organization.id, max_active_resources: input.maxActiveResources });
  await trx('users').where({ id: input.ownerId }).update({ current_organization_id: organization.id });
  return organization as NewOrganization;
}
