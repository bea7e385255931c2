import { describe, expect, it } from 'vitest';
import { ROLES } from '../../src/principal.ts';
import { loadOpenApiDocument } from '../../src/openapi-document.ts';

/** The conventions every operation of the contract keeps (STYLE.md, DESIGN.md §3). */
interface Parameter {
  $ref?: string;
  name?: string;
  in?: string;
  explode?: boolean;
  schema?: { type?: string; $ref?: string };
}
interface Operation {
  operationId: string;
  tags?: string[];
  summary?: string;
  description?: string;
  security?: Array<Record<string, string[]>>;
  parameters?: Parameter[];
  requestBody?: { content: Record<string, { schema: { $ref?: string } }> };
  responses: Record<string, { content?: Record<string, { schema: { $ref?: string } }> }>;
  'x-required-role'?: unknown;
  'x-error-format'?: unknown;
  'x-body-limit'?: unknown;
  'x-csrf-exempt'?: unknown;
  'x-deprecation'?: unknown;
  deprecated?: boolean;
}

const document = loadOpenApiDocument() as unknown as {
  security: Array<Record<string, string[]>>;
  paths: Record<string, Record<string, Operation>>;
  components: { securitySchemes: Record<string, unknown>; parameters: Record<string, Parameter>; schemas: Record<string, { type?: string; additionalProperties?: unknown }> };
};
const operations = Object.entries(document.paths).flatMap(([path, item]) =>
  Object.entries(item).map(([method, operation]) => ({ route: `${method.toUpperCase()} ${path}`, method, path, operation })),
);
const schemesOf = (operation: Operation) => (operation.security ?? document.security).flatMap((requirement) => Object.keys(requirement));
const usesCookie = (operation: Operation) => schemesOf(operation).includes('SessionCookie');
const parameter = (p: Parameter) => (p.$ref ? document.components.parameters[p.$ref.split('/').pop() ?? ''] : p);

/** Every route of the interface document (seed/000_f85e5053997f4385.txt). */
const INTERFACE_ROUTES = [
  'GET /healthz', 'GET /docs', 'GET /redoc', 'GET /openapi.json',
  'POST /v1/user/register', 'POST /v1/user/signin', 'GET /v1/auth/session', 'PATCH /v1/user/profile', 'POST /v1/user/logout',
  'GET /v1/sso/providers', 'GET /v1/sso/login/{provider}', 'GET /v1/sso/callback/{provider}',
  'POST /v1/auth/password-reset/request', 'POST /v1/auth/password-reset/confirm',
  // Email ownership: not in the interface document, added for email verification.
  'POST /v1/user/email-verification/confirm', 'POST /v1/user/email-verification/resend',
  'GET /v1/organization/api-keys', 'POST /v1/organization/api-keys', 'GET /v1/organization/api-keys/deployment-options',
  'PATCH /v1/organization/api-keys/{api_key_id}', 'DELETE /v1/organization/api-keys/{api_key_id}',
  'GET /api/v1/model-deployments', 'GET /api/v1/model-deployments/{deployment_id}', 'POST /api/v1/model-deployments',
  'DELETE /api/v1/model-deployments/{deployment_id}',
  'GET /api/v1/deployable-models', 'GET /api/v1/deployable-models/{model_id}',
  'POST /v1/chat/completions', 'POST /v1/embeddings', 'POST /v1/rerank', 'POST /v1/audio/transcriptions',
  'POST /v1/images/generations', 'GET /v1/models',
  'GET /v1/organization', 'PATCH /v1/organization', 'GET /v1/organization/members', 'POST /v1/organization/invitations',
  'GET /v1/organization/invitations', 'POST /v1/organization/invitations/{invitation_id}/resend',
  'GET /v1/invitations', 'GET /v1/invitations/by-token/{token}', 'POST /v1/invitations/by-token/{token}/accept',
  'POST /v1/invitations/by-token/{token}/reject', 'POST /v1/invitations/{invitation_id}/accept',
  'POST /v1/invitations/{invitation_id}/reject', 'POST /v1/invitations/register', 'POST /v1/invitations/sso/{provider}/start',
  'GET /v1/billing/config', 'GET /v1/billing/account', 'GET /v1/billing/usage-summary', 'GET /v1/billing/subscription',
  'POST /v1/billing/subscription/activate-postpaid', 'PATCH /v1/billing/subscription/collection-method',
  'GET /v1/billing/payment-methods', 'PATCH /v1/billing/payment-methods/default', 'DELETE /v1/billing/payment-methods/{payment_method_id}',
  'POST /v1/billing/portal/session', 'POST /v1/billing/checkout/setup-session', 'GET /v1/billing/invoices', 'POST /v1/billing/webhook',
];

/** Routes added to the interface since (sessions, member management, the spending limit, key limits, the deployment plan, events, webhooks). */
const ADDED_ROUTES = [
  // Readiness apart from liveness.
  'GET /readyz',
  'POST /api/v1/model-deployments/plan',
  // Elastic deployments: a deployment's scaling settings.
  'PATCH /api/v1/model-deployments/{deployment_id}',
  'GET /v1/billing/spending-limit', 'PUT /v1/billing/spending-limit',
  'GET /v1/user/sessions', 'DELETE /v1/user/sessions/{session_id}', 'POST /v1/user/sessions/revoke-others',
  'PATCH /v1/organization/members/{user_id}', 'DELETE /v1/organization/members/{user_id}',
  'DELETE /v1/organization/invitations/{invitation_id}',
  'GET /v1/organization/api-key-limits', 'PUT /v1/organization/api-key-limits',
  // Metrics per deployment and per API key.
  'GET /api/v1/model-deployments/{deployment_id}/metrics', 'GET /v1/organization/api-keys/{api_key_id}/usage',
  // Deployment events and organization webhooks.
  'GET /api/v1/model-deployments/{deployment_id}/events',
  'GET /v1/organization/webhook-endpoints', 'POST /v1/organization/webhook-endpoints',
  'GET /v1/organization/webhook-endpoints/{webhook_endpoint_id}', 'PATCH /v1/organization/webhook-endpoints/{webhook_endpoint_id}',
  'DELETE /v1/organization/webhook-endpoints/{webhook_endpoint_id}', 'POST /v1/organization/webhook-endpoints/{webhook_endpoint_id}/rotate-secret',
  'POST /v1/organization/webhook-endpoints/{webhook_endpoint_id}/test', 'GET /v1/organization/webhook-endpoints/{webhook_endpoint_id}/attempts',
  // Stripe's thin events (meter error reports) from an event destination.
  'POST /v1/billing/event-notifications',
  // The usage export for admins.
  'GET /v1/billing/usage/export',
  // The OpenAI surface as clients meet it: one model, and the legacy completions.
  'GET /v1/models/{model}', 'POST /v1/completions',
];

describe('the OpenAPI document', () => {
  it('describes every route of the interface, the routes added to it, and nothing else', () => {
    expect(operations.map((o) => o.route).sort()).toEqual([...INTERFACE_ROUTES, ...ADDED_ROUTES].sort());
  });

  it.each(operations.map((o) => [o.route, o.operation] as const))('%s has a camelCase operationId, a tag, a summary and a description', (_route, operation) => {
    expect(operation.operationId).toMatch(/^[a-z][a-zA-Z0-9]+$/);
    expect(operation.tags).toHaveLength(1);
    expect(operation.summary?.length).toBeGreaterThan(3);
    expect(operation.description?.length).toBeGreaterThan(10);
  });

  it('requires the CSRF token scheme (X-CSRF-Token) together with the session cookie on every state-changing route, and never on a read', () => {
    const wrong = operations
      .filter(({ method, operation }) => {
        const cookieRequirements = (operation.security ?? document.security).filter((requirement) => 'SessionCookie' in requirement);
        return cookieRequirements.some((requirement) => ('CsrfToken' in requirement) !== (method !== 'get'));
      })
      .map((o) => o.route);
    expect(wrong).toEqual([]);
    expect(document.components.securitySchemes.CsrfToken).toMatchObject({ type: 'apiKey', in: 'header', name: 'X-CSRF-Token' });
  });

  it('documents 401 on every route that needs a credential', () => {
    const missing = operations.filter(({ operation }) => schemesOf(operation).length > 0 && !operation.responses['401']).map((o) => o.route);
    expect(missing).toEqual([]);
  });

  it('states the role of every operation that accepts a session (x-required-role), and of no other', () => {
    const wrong = operations
      .filter(({ operation }) => (usesCookie(operation) ? !['signed-in', ...ROLES].includes(operation['x-required-role'] as string) : operation['x-required-role'] !== undefined))
      .map((o) => `${o.route}: ${String(o.operation['x-required-role'])}`);
    expect(wrong).toEqual([]);
  });

  it('documents 403 wherever a role applies (no organization yet, or a role too low)', () => {
    const missing = operations
      .filter(({ operation }) => operation['x-required-role'] !== undefined && operation['x-required-role'] !== 'signed-in' && !operation.responses['403'])
      .map((o) => o.route);
    expect(missing).toEqual([]);
  });

  it('states the error format of every operation (x-error-format), and offers API keys exactly on the inference ones', () => {
    expect(operations.filter(({ operation }) => !['problem', 'inference'].includes(operation['x-error-format'] as string)).map((o) => o.route)).toEqual([]);
    const keyRoutes = operations.filter(({ operation }) => schemesOf(operation).includes('ApiKeyBearer')).map((o) => o.route);
    expect(keyRoutes).toEqual(operations.filter(({ operation }) => operation['x-error-format'] === 'inference').map((o) => o.route));
    expect(keyRoutes.length).toBeGreaterThan(0);
  });

  it('answers errors in the shape of its x-error-format: Problem, or InferenceError', () => {
    for (const { route, operation } of operations) {
      const expected = operation['x-error-format'] === 'inference' ? '#/components/schemas/InferenceError' : '#/components/schemas/Problem';
      for (const [status, response] of Object.entries(operation.responses)) {
        if (/^[23]/.test(status)) continue;
        expect(response.content?.['application/json']?.schema.$ref, `${route} ${status}`).toBe(expected);
      }
    }
  });

  it('states the body limit (x-body-limit, bytes) of every operation that takes a body, and of no other, and documents its 413', () => {
    const wrong = operations
      .filter(({ operation }) => {
        const limit = operation['x-body-limit'];
        return operation.requestBody ? !(Number.isSafeInteger(limit) && (limit as number) > 0) || !operation.responses['413'] : limit !== undefined;
      })
      .map((o) => o.route);
    expect(wrong).toEqual([]);
  });

  it('exempts from CSRF (x-csrf-exempt) only operations that take no session: Stripe’s webhook and thin events, verified by signature', () => {
    const exempt = operations.filter(({ operation }) => operation['x-csrf-exempt'] !== undefined);
    expect(exempt.map((o) => [o.route, o.operation['x-csrf-exempt']]).sort()).toEqual([
      ['POST /v1/billing/event-notifications', true],
      ['POST /v1/billing/webhook', true],
    ]);
    expect(exempt.filter(({ operation }) => usesCookie(operation))).toEqual([]);
  });

  it('states no scalar query parameter with explode false (so the served, mocked and enforced documents read it alike)', () => {
    const isArray = (schema: Parameter['schema']) =>
      schema?.type === 'array' || (schema?.$ref !== undefined && document.components.schemas[schema.$ref.split('/').pop() ?? '']?.type === 'array');
    const exploded = operations
      .flatMap(({ route, operation }) => (operation.parameters ?? []).map((p) => ({ route, p: parameter(p) })))
      .filter(({ p }) => p?.in === 'query' && p.explode === false && !isArray(p.schema))
      .map(({ route, p }) => `${route} ${p?.name}`);
    expect(exploded).toEqual([]);
  });

  it('closes every management request body to unknown fields', () => {
    const open = operations
      .filter(({ operation }) => operation.requestBody?.content['application/json'] && operation['x-error-format'] === 'problem')
      // Stripe's events carry fields Stripe adds over time.
      .filter(({ operation }) => !['handleBillingWebhook', 'handleBillingEventNotification'].includes(operation.operationId ?? ''))
      .filter(({ operation }) => {
        const ref = operation.requestBody?.content['application/json']?.schema.$ref ?? '';
        return document.components.schemas[ref.split('/').pop() ?? '']?.additionalProperties !== false;
      })
      .map((o) => o.route);
    expect(open).toEqual([]);
  });

  it('marks deprecated exactly the operations with x-deprecation, each answer declaring Deprecation and Sunset', () => {
    const wrong = operations
      .filter(({ operation }) => {
        const deprecated = operation['x-deprecation'] !== undefined;
        const declared = Object.values(operation.responses).every((response) => {
          const headers = Object.keys((response as { headers?: object }).headers ?? {});
          return headers.includes('Deprecation') && headers.includes('Sunset');
        });
        return (operation.deprecated === true) !== deprecated || (deprecated && !declared);
      })
      .map((o) => o.route);
    expect(wrong).toEqual([]);
  });

  it('gives every integer id of a closed (management) schema a minimum of 1, so a dynamic mock invents no id the service never gives', () => {
    const schemas = document.components.schemas as Record<string, { additionalProperties?: unknown; properties?: Record<string, { type?: string; minimum?: number }> }>;
    const unbounded = Object.entries(schemas)
      .filter(([, schema]) => schema.additionalProperties === false)
      .flatMap(([name, schema]) => Object.entries(schema.properties ?? {}).map(([property, value]) => ({ at: `${name}.${property}`, property, value })))
      .filter(({ property, value }) => (property === 'id' || property.endsWith('_id')) && value.type === 'integer' && !((value.minimum ?? 0) >= 1))
      .map(({ at }) => at);
    expect(unbounded).toEqual([]);
  });

  it('declares X-Request-Id on every response', () => {
    const missing = operations.flatMap(({ route, operation }) =>
      Object.entries(operation.responses)
        .filter(([, response]) => !Object.keys((response as { headers?: object }).headers ?? {}).includes('X-Request-Id'))
        .map(([status]) => `${route} ${status}`),
    );
    expect(missing).toEqual([]);
  });
});
