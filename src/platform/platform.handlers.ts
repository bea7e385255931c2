import type { Knex } from 'knex';
import type { Document } from 'openapi-backend';
import { AppError } from '../errors.ts';
import type { Handlers } from '../http/types.ts';
import { databaseAnswers } from '../db/database.ts';
import { REDOC_CSP, redocPage, SWAGGER_UI_CSP, swaggerUiPage } from './docs.ts';

type PlatformHandlers = Pick<Handlers, 'getHealth' | 'getOpenApiDocument' | 'getDocs' | 'getRedoc'>;

const HTML = { 'Content-Type': 'text/html; charset=utf-8' };

export function platformHandlers(deps: { db: Knex; document: Document }): PlatformHandlers {
  const title = deps.document.info.title;
  const docsHtml = swaggerUiPage(title);
  const redocHtml = redocPage(title);
  return {
    getHealth: async () => {
      if (!(await databaseAnswers(deps.db))) {
        throw new AppError('SERVICE_UNAVAILABLE', 'The database does not answer.', { headers: { 'Retry-After': '5' } });
      }
      return { status: 200, body: { status: 'ok' } };
    },
    getOpenApiDocument: () => ({ status: 200, body: deps.document as unknown as Record<string, unknown> }),
    getDocs: () => ({ status: 200, body: docsHtml, headers: { ...HTML, 'Content-Security-Policy': SWAGGER_UI_CSP } }),
    getRedoc: () => ({ status: 200, body: redocHtml, headers: { ...HTML, 'Content-Security-Policy': REDOC_CSP } }),
  };
}
