import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import { DeployableModelRow } from '../db/models/deployable-models.ts';
import { ModelSpecRow } from '../db/models/model-specs.ts';

/** Every query of the catalog area: deployable models and their launch combinations. */
type Db = Knex | Knex.Transaction;

export interface CatalogFilter {
  /** The organization asking: a model restricted to others is invisible to it. */
  organizationId: number;
  enabledOnly: boolean;
  modelType?: components['schemas']['DeployableModelType'];
  provider?: string;
  /** A tsquery (see `searchTerms`): matches ranked first, by relevance. */
  terms?: string;
}

/** The models the organization may see (unrestricted, or restricted to it). */
function visibleTo(db: Db, organizationId: number, enabledOnly: boolean) {
  const query = DeployableModelRow.query(db)
    .alias('m')
    .where((q) => q.whereNull('m.allowed_organization_ids').orWhereRaw('? = any(m.allowed_organization_ids)', [organizationId]))
    .select('m.*');
  if (enabledOnly) query.where('m.enabled', true);
  return query;
}

/** The visible models of one type, search matches by relevance, then in catalog order. */
export async function listVisibleModels(db: Db, filter: CatalogFilter & { modelType: NonNullable<CatalogFilter['modelType']> }): Promise<DeployableModelRow[]> {
  const query = visibleTo(db, filter.organizationId, filter.enabledOnly).where('m.model_type', filter.modelType);
  if (filter.provider) query.whereRaw('lower(m.provider) = lower(?)', [filter.provider]);
  if (filter.terms) {
    query
      .whereRaw(`(m.search @@ to_tsquery('simple', ?) or m.search @@ to_tsquery('english', ?))`, [filter.terms, filter.terms])
      .orderByRaw(`greatest(ts_rank_cd(m.search, to_tsquery('simple', ?)), ts_rank_cd(m.search, to_tsquery('english', ?))) desc`, [filter.terms, filter.terms]);
  }
  return query.orderBy([{ column: 'm.sort_order' }, { column: 'm.display_name' }]);
}

/** A visible model by id or by name. */
export async function findVisibleModel(
  db: Db,
  organizationId: number,
  by: { id: string } | { modelName: string },
  enabledOnly: boolean,
): Promise<DeployableModelRow | undefined> {
  const query = visibleTo(db, organizationId, enabledOnly);
  if ('id' in by) query.where('m.id', by.id);
  else query.where('m.model_name', by.modelName);
  return query.first();
}

/** The launch combinations of these models, by format then size. */
export async function specsOf(db: Db, modelIds: readonly string[]): Promise<ModelSpecRow[]> {
  if (!modelIds.length) return [];
  return ModelSpecRow.query(db)
    .whereIn('deployable_model_id', modelIds)
    .orderBy([{ column: 'model_format' }, { column: 'model_size_in_billions' }]);
}

/** Enables or disables a model by name; false when no model has the name. */
export async function setModelEnabled(db: Db, modelName: string, enabled: boolean): Promise<boolean> {
  return (await DeployableModelRow.query(db).where({ model_name: modelName }).patch({ enabled })) > 0;
}

/** Offers a model only to these organizations (null: to every one); false when no model has the name. */
export async function restrictModel(db: Db, modelName: string, organizationIds: number[] | null): Promise<boolean> {
  return (await DeployableModelRow.query(db).where({ model_name: modelName }).patch({ allowed_organization_ids: organizationIds })) > 0;
}
