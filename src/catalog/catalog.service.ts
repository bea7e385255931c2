import type { Knex } from 'knex';
import type { components, operations } from '../../generated/api.d.ts';
import type { SessionPrincipal } from '../principal.ts';
import type { Keyring } from '../crypto.ts';
import type { DeployableModelRow } from '../db/models/deployable-models.ts';
import type { ModelSpec } from '../deployments/launch-spec.ts';
import { AppError } from '../errors.ts';
import { findVisibleModel, listVisibleModels, specsOf, type CatalogFilter } from './catalog.repository.ts';
import { CatalogCursors } from './list-cursor.ts';

type DeployableModel = components['schemas']['DeployableModel'];
type DeployableModelList = components['schemas']['DeployableModelList'];

/** The list's query: its filters, `q`, and the page (`limit`, `offset` or `after`). */
export type CatalogQuery = NonNullable<operations['listDeployableModels']['parameters']['query']>;

export interface CatalogModel extends DeployableModel {
  launchSpecs: ModelSpec[];
}

/**
 * The catalog of deployable models. A model restricted to some organizations is invisible to the
 * others. Search ranks name matches above family, provider and tags, above the description.
 */
export class CatalogService {
  readonly #db: Knex;
  readonly #cursors: CatalogCursors;

  constructor(db: Knex, keyring: Keyring) {
    this.#db = db;
    this.#cursors = new CatalogCursors(keyring);
  }

  /**
   * A page of the models the query matches (LLMs when it names no type, every type for `all`):
   * `offset` models in, or after the position an opaque cursor (`after`, a previous page's
   * `next_cursor`) carries; never both. `total` counts every match whatever the page.
   */
  async list(principal: SessionPrincipal, query: CatalogQuery): Promise<DeployableModelList> {
    const limit = query.limit ?? 100;
    const offset = query.offset ?? 0;
    if (query.after !== undefined && offset !== 0) {
      throw new AppError('VALIDATION_FAILED', 'Send either `after` or `offset`, not both: a cursor already says where the page starts.', {
        errors: [{ location: 'query/offset', message: 'must be 0 or absent when `after` is given' }],
      });
    }
    const modelType = query.model_type ?? 'LLM';
    const filter: CatalogFilter = {
      organizationId: organizationOf(principal),
      enabledOnly: query.enabled_only ?? true,
      ...(modelType === 'all' ? {} : { modelType }),
      ...(query.provider === undefined ? {} : { provider: query.provider }),
      ...(query.q === undefined ? {} : { terms: searchTerms(query.q) }),
    };
    const scope = { userId: principal.user.id, filter };
    const after = query.after === undefined ? undefined : this.#cursors.read(scope, query.after);
    const { rows, total, next } = await listVisibleModels(this.#db, filter, { limit, offset, ...(after ? { after } : {}) });
    const items = (await this.#withSpecs(rows)).map(toDeployableModel);
    return { items, total, limit, offset, next_cursor: next ? this.#cursors.write(scope, next) : null };
  }

  async get(principal: SessionPrincipal, id: string, enabledOnly = true): Promise<DeployableModel> {
    const { launchSpecs: _, ...model } = await this.#find(principal, { id }, enabledOnly);
    return model;
  }

  /** A catalog model by name for deployment, with its launch combinations. */
  async findByName(principal: SessionPrincipal, modelName: string): Promise<CatalogModel | undefined> {
    try {
      return await this.#find(principal, { modelName }, true);
    } catch (error) {
      if (error instanceof AppError && error.code === 'NOT_FOUND') return undefined;
      throw error;
    }
  }

  async #find(principal: SessionPrincipal, by: { id: string } | { modelName: string }, enabledOnly: boolean): Promise<CatalogModel> {
    const found = await findVisibleModel(this.#db, organizationOf(principal), by, enabledOnly);
    const [row] = await this.#withSpecs(found ? [found] : []);
    if (!row) throw new AppError('NOT_FOUND', 'No deployable model matches, or it is not available to your organization.');
    return { ...toDeployableModel(row), launchSpecs: row.specs };
  }

  async #withSpecs(rows: DeployableModelRow[]): Promise<WithSpecs[]> {
    // Grouped by model in one pass (in their order: by format, then size), not searched per model.
    const specsByModel = Map.groupBy(await specsOf(this.#db, rows.map((row) => row.id)), (spec) => spec.deployable_model_id);
    return rows.map((row) => ({
      row,
      specs: (specsByModel.get(row.id) ?? []).map((spec) => ({
        modelFormat: spec.model_format,
        modelSizeInBillions: Number(spec.model_size_in_billions),
        quantizations: spec.quantizations,
        modelEngine: spec.model_engine,
      })),
    }));
  }
}

/** Outside any organization (a profile not complete), only unrestricted models are visible. */
function organizationOf(principal: SessionPrincipal): number {
  return principal.organization?.id ?? 0;
}

/** Free text as a prefix-matching tsquery (`qwen 7` → `qwen:* & 7:*`), or undefined when empty. */
export function searchTerms(q: string | undefined): string | undefined {
  const terms = (q ?? '').toLowerCase().split(/[^\p{L}\p{N}.]+/u).map((term) => term.replace(/^\.+|\.+$/g, '')).filter(Boolean);
  return terms.length ? terms.map((term) => `${term}:*`).join(' & ') : undefined;
}

interface WithSpecs {
  row: DeployableModelRow;
  specs: ModelSpec[];
}

function toDeployableModel({ row: r, specs }: WithSpecs): DeployableModel {
  return {
    id: r.id,
    model_name: r.model_name,
    display_name: r.display_name,
    provider: r.provider,
    family: r.family,
    model_type: r.model_type,
    description: r.description,
    tags: r.tags,
    enabled: r.enabled,
    sort_order: r.sort_order,
    hosted: r.hosted,
    specs: specs.map((spec) => ({
      model_format: spec.modelFormat,
      model_size_in_billions: spec.modelSizeInBillions,
      quantizations: spec.quantizations,
    })),
    created_at: r.created_at.toISOString(),
    updated_at: r.updated_at.toISOString(),
  };
}
