import type { Request } from 'express';
import type { Context } from 'openapi-backend';
import { AppError } from '../errors.ts';
import { clientAddress } from '../http/client-address.ts';
import type { SecurityHandlers } from '../http/openapi.ts';
import type { ApiKeyPrincipal } from '../principal.ts';
import type { ApiKeysService } from './api-keys.service.ts';

/** Authentication by `Authorization: Bearer svc-sk-…`, accepted on inference routes only. */
export function apiKeyAuthentication(deps: { apiKeys: ApiKeysService }): SecurityHandlers['ApiKeyBearer'] {
  return async (_context: Context, req: Request): Promise<ApiKeyPrincipal> => {
    const header = req.get('authorization');
    if (!header) throw new AppError('UNAUTHENTICATED', 'Send an API key as Authorization: Bearer svc-sk-…', { inference: { code: 'missing_credentials' } });
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match?.[1]) {
      throw new AppError('UNAUTHENTICATED', 'Send the API key as Authorization: Bearer svc-sk-…', { inference: { code: 'invalid_api_key' } });
    }
    return deps.apiKeys.authenticate(match[1], clientAddress(req));
  };
}
