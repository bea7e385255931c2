import type { Handlers } from '../http/types.ts';
import type { CatalogService } from './catalog.service.ts';

export function catalogHandlers(deps: { catalog: CatalogService }): Pick<Handlers, 'listDeployableModels' | 'getDeployableModel'> {
  return {
    listDeployableModels: async (context) => ({ status: 200, body: await deps.catalog.list(context.auth, context.query) }),
    getDeployableModel: async (context) => ({
      status: 200,
      body: await deps.catalog.get(context.auth, context.params.model_id, context.query.enabled_only),
    }),
  };
}
