import type { IncomingHttpHeaders } from 'node:http';
import type { Request, Response } from 'express';
import type { Logger } from 'pino';
import type { operations } from '../../generated/api.d.ts';
import type { OperationSecurity } from '../../generated/security.d.ts';
import type { ApiKeyPrincipal, SessionPrincipal } from '../principal.ts';

/** Every operationId of the OpenAPI document. */
export type OperationId = keyof operations;

type Operation<K extends OperationId> = operations[K];
type ContentOf<T> = T extends { content: infer C } ? C[keyof C] : undefined;
type Responses<K extends OperationId> = Operation<K>['responses'];
type SuccessStatus<K extends OperationId> = Extract<keyof Responses<K>, 200 | 201 | 202 | 204 | 302 | 303>;

export type RequestBody<K extends OperationId> = Operation<K> extends { requestBody: { content: infer C } }
  ? C[keyof C]
  : Operation<K> extends { requestBody?: { content: infer C } }
    ? C[keyof C] | undefined
    : undefined;

type Parameters<K extends OperationId, Where extends 'path' | 'query'> = Operation<K>['parameters'] extends {
  [P in Where]?: infer T;
}
  ? [T] extends [never] ? Record<string, never> : NonNullable<T>
  : Record<string, never>;

/** What a handler answers: one of the operation's documented success responses. */
export type Reply<K extends OperationId> = {
  [S in SuccessStatus<K>]: {
    status: S;
    body: ContentOf<Responses<K>[S]>;
    headers?: Record<string, string | string[]>;
  };
}[SuccessStatus<K>];

/** The caller each security scheme of the document resolves; `none`: the empty requirement, no caller. */
interface PrincipalOf {
  SessionCookie: SessionPrincipal;
  /** Required together with SessionCookie on state-changing routes: the same session caller. */
  CsrfToken: SessionPrincipal;
  ApiKeyBearer: ApiKeyPrincipal;
  none: undefined;
}

/**
 * The caller of an operation, from its security requirement in the document: a `SessionPrincipal`
 * on a session route, a `Principal` (session or API key) on an inference route, `undefined` on a
 * public route. The binding resolves it before the handler runs, or answers 401.
 */
export type AuthOf<K extends OperationId> = K extends keyof OperationSecurity ? PrincipalOf[OperationSecurity[K]] : never;

/** The validated request, as a handler sees it. */
export interface HandlerContext<K extends OperationId> {
  operationId: K;
  body: RequestBody<K>;
  params: Parameters<K, 'path'>;
  query: Parameters<K, 'query'>;
  headers: IncomingHttpHeaders;
  cookies: Record<string, string | undefined>;
  /** The authenticated caller, typed from the operation's security requirement (AuthOf). */
  auth: AuthOf<K>;
  /** The operation's `x-body-limit` in bytes: a handler that reads its body as it streams (multipart) enforces it. */
  bodyLimit: [NonNullable<Operation<K>['requestBody']>] extends [never] ? undefined : number;
  requestId: string;
  log: Logger;
  req: Request;
  res: Response;
}

export type Handler<K extends OperationId> = (context: HandlerContext<K>) => Reply<K> | Promise<Reply<K>>;

/** Fails to compile unless generated/security.d.ts names exactly the operations of api.d.ts (both come from one document). */
type Assert<T extends true> = T;
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type _EveryOperationHasItsSecurity = Assert<Same<keyof OperationSecurity, OperationId>>;

/** One handler for every operation of the document; the compiler refuses a missing one. */
export type Handlers = { [K in OperationId]: Handler<K> };
