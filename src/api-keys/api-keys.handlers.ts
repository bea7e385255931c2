import type { Handlers } from '../http/types.ts';
import type { ApiKeysService } from './api-keys.service.ts';

type ApiKeyHandlers = Pick<
  Handlers,
  'listApiKeys' | 'createApiKey' | 'getApiKeyUsage' | 'listApiKeyDeploymentOptions' | 'updateApiKey' | 'revokeApiKey' | 'getApiKeyLimitDefaults' | 'updateApiKeyLimitDefaults'
>;

export function apiKeyHandlers(deps: { apiKeys: ApiKeysService }): ApiKeyHandlers {
  const { apiKeys } = deps;
  return {
    listApiKeys: async (context) => ({ status: 200, body: await apiKeys.list(context.auth) }),
    createApiKey: async (context) => ({ status: 201, body: await apiKeys.create(context.auth, context.body) }),
    listApiKeyDeploymentOptions: async (context) => ({ status: 200, body: await apiKeys.deploymentOptions(context.auth) }),
    updateApiKey: async (context) => ({ status: 200, body: await apiKeys.update(context.auth, context.params.api_key_id, context.body) }),
    getApiKeyUsage: async (context) => ({ status: 200, body: await apiKeys.usage(context.auth, context.params.api_key_id, context.query) }),
    revokeApiKey: async (context) => ({ status: 200, body: await apiKeys.revoke(context.auth, context.params.api_key_id) }),
    getApiKeyLimitDefaults: async (context) => ({ status: 200, body: await apiKeys.limitDefaults(context.auth) }),
    updateApiKeyLimitDefaults: async (context) => ({ status: 200, body: await apiKeys.setLimitDefaults(context.auth, context.body) }),
  };
}
