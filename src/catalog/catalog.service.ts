import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import type { SessionPrincipal } from '../accounts/principal.ts';
import { AppError } from '../errors.ts';

type DeployableModel = components['schemas']['DeployableModel'];
type ModelType = components['schemas']['DeployableModelType'];

export interface CatalogQuery {
  enabled_only?: boolean;
  model_type?: ModelType;
  provider?: string;
  q?: string;
}

/** A launch combination of a catalog model, as the serving engine names it. */
export interface ModelSpec {
  modelFormat: string;
  modelSizeInBillions: number;
  quantizations: string[];
  modelEngine: string;
}

export interface CatalogModel extends DeployableModel {
  launchSpecs: ModelSpec[];
}

/**
 * The catalog of deployable models. A model restricted to some organizations is invisible to the
 * others. Search ranks name matches above family, provider and tags, above the description.
 */
export class CatalogService {
  readonly #db: Knex;

  constructor(db: Knex) {
    this.#db = db;
  }

  async list(principal: SessionPrincipal, query: CatalogQuery): Promise<DeployableModel[]> {
    const builder = this.#visibleTo(principal).where('m.model_type', query.model_type ?? 'LLM');
    if (query.enabled_only ?? true) builder.where('m.enabled', true);
    if (query.provider) builder.whereRaw('lower(m.provider) = lower(?)', [query.provider]);
    const terms = searchTerms(query.q);
    if (terms) {
      builder
        .whereRaw(`(m.search @@ to_tsquery('simple', ?) or m.search @@ to_tsquery('english', ?))`, [terms, terms])
        .orderByRaw(`greatest(ts_rank_cd(m.search, to_tsquery('simple', ?)), ts_rank_cd(m.search, to_tsquery('english', ?))) desc`, [terms, terms]);
    }
    builder.orderBy([{ column: 'm.sort_order' }, { column: 'm.display_name' }]);
    return (await withSpecs(this.#db, await builder)).map(toDeployableModel);
  }

  async get(principal: SessionPrincipal, id: string, enabledOnly = true): Promise<DeployableModel> {
    const { launchSpecs: _, ...model } = await this.find(principal, (m) => m.where('m.id', id), enabledOnly);
    return model;
  }

  /** A catalog model by name for deployment, with its launch combinations. */
  async findByName(principal: SessionPrincipal, modelName: string): Promise<CatalogModel | undefined> {
    try {
      return await this.find(principal, (m) => m.where('m.model_name', modelName), true);
    } catch (error) {
      if (error instanceof AppError && error.code === 'NOT_FOUND') return undefined;
      throw error;
    }
  }

  async find(principal: SessionPrincipal, where: (builder: Knex.QueryBuilder) => Knex.QueryBuilder, enabledOnly: boolean): Promise<CatalogModel> {
    const builder = where(this.#visibleTo(principal));
    if (enabledOnly) builder.where('m.enabled', true);
    const [row] = await withSpecs(this.#db, await builder.limit(1));
    if (!row) throw new AppError('NOT_FOUND', 'No deployable model matches, or it is not available to your organization.');
    return { ...toDeployableModel(row), launchSpecs: row.specs };
  }

  #visibleTo(principal: SessionPrincipal): Knex.QueryBuilder {
    const organizationId = principal.organization?.id ?? 0;
    return this.#db('deployable_models as m')
      .where((q) => q.whereNull('m.allowed_organization_ids').orWhereRaw('? = any(m.allowed_organization_ids)', [organizationId]))
      .select('m.*');
  }
}

/** Free text as a prefix-matching tsquery (`qwen 7` → `qwen:* & 7:*`), or undefined when empty. */
export function searchTerms(q: string | undefined): string | undefined {
  const terms = (q ?? '').toLowerCase().split(/[^\p{L}\p{N}.]+/u).map((term) => term.replace(/^\.+|\.+$/g, '')).filter(Boolean);
  return terms.length ? terms.map((term) => `${term}:*`).join(' & ') : undefined;
}

interface Row extends Record<string, unknown> {
  id: string;
  specs: ModelSpec[];
}

async function withSpecs(db: Knex, rows: Array<Record<string, unknown>>): Promise<Row[]> {
  if (!rows.length) return [];
  const specs = await db('model_specs')
    .whereIn('deployable_model_id', rows.map((row) => row.id as string))
    .orderBy([{ column: 'model_format' }, { column: 'model_size_in_billions' }]);
  return rows.map((row) => ({
    ...row,
    id: row.id as string,
    specs: specs
      .filter((spec) => spec.deployable_model_id === row.id)
      .map((spec) => ({
        modelFormat: spec.model_format,
        modelSizeInBillions: Number(spec.model_size_in_billions),
        quantizations: spec.quantizations,
        modelEngine: spec.model_engine,
      })),
  }));
}

function toDeployableModel(r: Row): DeployableModel {
  return {
    id: r.id,
    model_name: r.model_name as string,
    display_name: r.display_name as string,
    provider: r.provider as string,
    family: r.family as string,
    model_type: r.model_type as ModelType,
    description: r.description as string,
    tags: r.tags as string[],
    enabled: r.enabled as boolean,
    sort_order: r.sort_order as number,
    hosted: r.hosted as boolean,
    specs: r.specs.map((spec) => ({
      model_format: spec.modelFormat,
      model_size_in_billions: spec.modelSizeInBillions,
      quantizations: spec.quantizations,
    })),
    created_at: (r.created_at as Date).toISOString(),
    updated_at: (r.updated_at as Date).toISOString(),
  };
}
