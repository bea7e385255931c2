import type { components } from '../../../generated/api.d.ts';
import { BaseModel } from '../base-model.ts';

/** `organizations`: a customer organization; its members, keys, deployments and billing account hang off it. */
export class OrganizationRow extends BaseModel {
  static override tableName = 'organizations';
  declare id: number;
  declare name: string;
  declare slug: string;
  declare description: string | null;
  declare status: components['schemas']['OrganizationStatus'];
  declare created_at: Date;
  declare updated_at: Date;
}
