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
  /** Only models of this type; every type when absent. */
  modelType?: components['schemas']['DeployableModelType'];
  provider?: string;
  /** A tsquery (see `searchTerms`): only models that match it, most relevant first. */
  terms?: string;
}

/** A model's place in the list's order: its search rank (with `terms` only), `sort_order`, `display_name`, id. */
export interface CatalogPosition {
  rank: number | null;
  sortOrder: number;
  displayName: string;
  id: string;
}

/** The relevance of a model to a tsquery (bound twice): the better of its simple and English matches. */
const RANK = `greatest(ts_rank_cd(m.search, to_tsquery('simple', ?)), ts_rank_cd(m.search, to_tsquery('english', ?)))`;

/** The models the organization may see (unrestricted, or restricted to it). */
function visibleTo(db: Db, organizationId: number, enabledOnly: boolean) {
  const query = DeployableModelRow.query(db)
    .alias('m')
    .where((q) => q.whereNull('m.allowed_organization_ids').orWhereRaw('? = any(m.allowed_organization_ids)', [organizationId]))
    .select('m.*');
  if (enabledOnly) query.where('m.enabled', true);
  return query;
}

/** The visible models that match the filter, in no order. */
function matching(db: Db, filter: CatalogFilter) {
  const query = visibleTo(db, filter.organizationId, filter.enabledOnly);
  if (filter.modelType) query.where('m.model_type', filter.modelType);
  if (filter.provider) query.whereRaw('lower(m.provider) = lower(?)', [filter.provider]);
  if (filter.terms) query.whereRaw(`(m.search @@ to_tsquery('simple', ?) or m.search @@ to_tsquery('english', ?))`, [filter.terms, filter.terms]);
  return query;
}

/**
 * A page of the visible models that match the filter: search matches by relevance, then in catalog
 * order (`sort_order`, `display_name`, id); `offset` models in, or after a position (keyset). `next`
 * is the position of the page's last model when more follow. `total` counts every match.
 */
export async function listVisibleModels(
  db: Db,
  filter: CatalogFilter,
  page: { limit: number; offset: number; after?: CatalogPosition },
): Promise<{ rows: DeployableModelRow[]; total: number; next: CatalogPosition | null }> {
  const { terms } = filter;
  const query = matching(db, filter);
  const after = page.after;
  if (after) {
    const following = ['(m.sort_order, m.display_name, m.id) > (?, ?, ?::uuid)', [after.sortOrder, after.displayName, after.id]] as const;
    if (terms === undefined) query.whereRaw(...following);
    else {
      query.where((q) =>
        q.whereRaw(`${RANK} < ?::real`, [terms, terms, after.rank ?? 0]).orWhere((tie) => tie.whereRaw(`${RANK} = ?::real`, [terms, terms, after.rank ?? 0]).whereRaw(...following)),
      );
    }
  }
  if (terms !== undefined) query.select(db.raw(`${RANK} as rank`, [terms, terms])).orderBy('rank', 'desc');
  query.orderBy([{ column: 'm.sort_order' }, { column: 'm.display_name' }, { column: 'm.id' }]).offset(page.offset).limit(page.limit + 1);
  const [found, total] = await Promise.all([query, matching(db, filter).resultSize()]);
  const rows = (found as Array<DeployableModelRow & { rank?: number }>).slice(0, page.limit);
  const last = rows.at(-1);
  const next = found.length > page.limit && last ? { rank: last.rank ?? null, sortOrder: last.sort_order, displayName: last.display_name, id: last.id } : null;
  for (const row of rows) delete row.rank;
  return { rows, total, next };
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

/** What the inference proxy needs of a catalog model: the most one request can use, and the routes it serves. */
export interface ModelTraits {
  /** Its context length in tokens (a language model's); null when it states none. */
  contextLength: number | null;
  /** Its abilities, as Xinference's specification states them (`generate` serves `/v1/completions`). */
  abilities: readonly string[];
}

/** The traits of every catalog model, by name. */
export async function modelTraits(db: Db): Promise<Map<string, ModelTraits>> {
  const rows = await DeployableModelRow.query(db).select('model_name', 'context_length', 'abilities');
  return new Map(rows.map((row) => [row.model_name, { contextLength: row.context_length, abilities: row.abilities }]));
}
