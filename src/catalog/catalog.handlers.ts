import { sessionOf } from '../accounts/accounts.handlers.ts';
import type { Handlers } from '../http/types.ts';
import type { CatalogService } from './catalog.service.ts';

export function catalogHandlers(deps: { catalog: CatalogService }): Pick<Handlers, 'listDeployableModels' | 'getDeployableModel'> {
  return {
    listDeployableModels: async (context) => ({ status: 200, body: { items: await deps.catalog.list(sessionOf(context), context.query) } }),
    getDeployableModel: async (context) => ({
      status: 200,
      body: await deps.catalog.get(sessionOf(context), context.params.model_id, context.query.enabled_only),
    }),
  };
}
