import { sessionOf } from '../accounts/accounts.handlers.ts';
import type { Handlers } from '../http/types.ts';
import type { ApiKeysService } from './api-keys.service.ts';

type ApiKeyHandlers = Pick<Handlers, 'listApiKeys' | 'createApiKey' | 'listApiKeyDeploymentOptions' | 'updateApiKey' | 'revokeApiKey'>;

export function apiKeyHandlers(deps: { apiKeys: ApiKeysService }): ApiKeyHandlers {
  const { apiKeys } = deps;
  return {
    listApiKeys: async (context) => ({ status: 200, body: await apiKeys.list(sessionOf(context)) }),
    createApiKey: async (context) => ({ status: 201, body: await apiKeys.create(sessionOf(context), context.body) }),
    listApiKeyDeploymentOptions: async (context) => ({ status: 200, body: await apiKeys.deploymentOptions(sessionOf(context)) }),
    updateApiKey: async (context) => ({ status: 200, body: await apiKeys.update(sessionOf(context), context.params.api_key_id, context.body) }),
    revokeApiKey: async (context) => ({ status: 200, body: await apiKeys.revoke(sessionOf(context), context.params.api_key_id) }),
  };
}
