import type { components } from '../../generated/api.d.ts';
import type { Api } from '../helpers/browser.ts';

type CreateApiKeyRequest = components['schemas']['CreateApiKeyRequest'];

/** A new API key of the caller's organization, scoped to `deploymentIds`, made through the API: its secret and id. */
export async function apiKey(owner: { api: Api }, deploymentIds: string[], extra: Partial<CreateApiKeyRequest> = {}): Promise<{ key: string; id: number }> {
  const { data, error, response } = await owner.api.POST('/v1/organization/api-keys', { body: { name: 'test', deployment_ids: deploymentIds, ...extra } });
  if (!data) throw new Error(`create API key failed: ${response.status} ${JSON.stringify(error)}`);
  return { key: data.key, id: data.api_key.id };
}
