import { readFileSync } from 'node:fs';
import type { Document } from 'openapi-backend';

export const OPENAPI_PATH = new URL('../generated/openapi.json', import.meta.url);

/** The generated OpenAPI document the server is bound to. */
export function loadOpenApiDocument(): Document {
  return JSON.parse(readFileSync(OPENAPI_PATH, 'utf8')) as Document;
}
