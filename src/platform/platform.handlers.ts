import type { Knex } from 'knex';
import type { Document } from 'openapi-backend';
import { AppError } from '../errors.ts';
import type { Handlers } from '../http/types.ts';
import { databaseAnswers } from '../db/database.ts';
import type { NotReadyReason, Readiness } from './readiness.ts';
import { REDOC_CSP, redocPage, servedDocument, SWAGGER_UI_CSP, swaggerUiPage } from './docs.ts';

type PlatformHandlers = Pick<Handlers, 'getHealth' | 'getReadiness' | 'getOpenApiDocument' | 'getDocs' | 'getRedoc'>;

/** What a not-ready answer says, per reason. */
const NOT_READY: Record<NotReadyReason, string> = {
  draining: 'This process is shutting down; send new requests to another replica.',
  database_unreachable: 'The database does not answer.',
  migrations_pending: 'Migrations of this version are not applied yet; the migration job has not finished.',
};

const HTML = { 'Content-Type': 'text/html; charset=utf-8' };

export function platformHandlers(deps: { db: Knex; document: Document; readiness: Readiness }): PlatformHandlers {
  const title = deps.document.info.title;
  const docsHtml = swaggerUiPage(title);
  const redocHtml = redocPage(title);
  const served = servedDocument(deps.document);
  return {
    getHealth: async () => {
      if (!(await databaseAnswers(deps.db))) {
        throw new AppError('SERVICE_UNAVAILABLE', 'The database does not answer.', { headers: { 'Retry-After': '5' } });
      }
      return { status: 200, body: { status: 'ok' } };
    },
    getReadiness: async () => {
      const [reason] = await deps.readiness.reasons();
      if (reason) throw new AppError('SERVICE_UNAVAILABLE', NOT_READY[reason], { headers: { 'Retry-After': '5' } });
      return { status: 200, body: { status: 'ready' } };
    },
    getOpenApiDocument: () => ({ status: 200, body: served as unknown as Record<string, unknown> }),
    getDocs: () => ({ status: 200, body: docsHtml, headers: { ...HTML, 'Content-Security-Policy': SWAGGER_UI_CSP } }),
    getRedoc: () => ({ status: 200, body: redocHtml, headers: { ...HTML, 'Content-Security-Policy': REDOC_CSP } }),
  };
}
