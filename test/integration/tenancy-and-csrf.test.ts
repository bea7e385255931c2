import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import addFormats from 'ajv-formats';
import { OpenAPIBackend } from 'openapi-backend';
import { forJsonSchemaValidators, loadOpenApiDocument } from '../../src/openapi-document.ts';
import { apiKey } from '../factories/api-keys.ts';
import { verifiedUser, type SignedInUser } from '../factories/accounts.ts';
import { checkoutWithCard, webhooksSettled } from '../factories/billing.ts';
import { deployment } from '../factories/deployments.ts';
import { invitedMember, type InvitedRole } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { changedTables, tableDigester } from '../helpers/db-digest.ts';
import { waitUntil } from '../helpers/net.ts';

/**
 * Generated from the published document, so a new operation is covered or this file says what it
 * lacks (docs/security.md, ASVS 5.0 V8 and V3):
 * - cross-organization access: every operation that takes the id of an organization's resource,
 *   called by the super_admin of another organization with the first one's id, is refused (404, or
 *   403 where documented) and writes nothing;
 * - CSRF: every state-changing operation that accepts the session cookie, sent with the session
 *   but without `X-CSRF-Token`, answers 403 `CSRF_FAILED` and writes nothing;
 * - roles: every operation whose `x-required-role` is above a role, called by a member of that
 *   role, answers 403 `FORBIDDEN` and writes nothing.
 */
interface Operation {
  operationId: string;
  'x-required-role'?: string;
  requestBody?: { content: Record<string, { example?: unknown; examples?: Record<string, { value: unknown }> }> };
  parameters?: Array<{ name: string; in: string }>;
  security?: Array<Record<string, string[]>>;
}
const document = loadOpenApiDocument() as unknown as {
  paths: Record<string, Record<string, Operation>>;
  security?: Array<Record<string, string[]>>;
};

/** The document's example body of the operation, its first when it has several (so that a refusal is the role's, not the body's), or none. */
function exampleBody(operation: Operation): string | undefined {
  const media = operation.requestBody?.content['application/json'];
  return media ? JSON.stringify(media.example ?? Object.values(media.examples ?? {})[0]?.value) : undefined;
}

const operations = Object.entries(document.paths).flatMap(([template, item]) =>
  (['get', 'post', 'put', 'patch', 'delete'] as const).filter((method) => item[method]).map((method) => ({ template, method, operation: item[method] as Operation })),
);

/** Path parameters that name no organization's resource, and why. */
const NOT_TENANT_OWNED: Record<string, string> = {
  model_id: 'the catalog is the same for everyone',
  provider: 'an SSO provider of the server',
  token: 'a secret capability (an invitation link): whoever holds it may use it',
};

/** Tables and job queues a peer writes meanwhile: the processor's webhooks (and their jobs), brute-force counters. */
const WRITTEN_ANYWAY = ['billing_webhook_events', 'billing-event', 'rate_limit_points'];

let app: TestApp;
/** The organization whose resources are reached for; its super_admin. */
let victim: SignedInUser;
/** The super_admin of another organization. */
let intruder: SignedInUser;
/** A member of the victim's organization for each role below super_admin. */
const roles: Partial<Record<InvitedRole, SignedInUser>> = {};
/** The victim's resource for each path parameter that names one. */
const victims: Record<string, string> = {};
let digest: () => Promise<string>;
/** The service's own request validation (openapi-backend over the published document), offline. */
const requestValidator = new OpenAPIBackend({ definition: forJsonSchemaValidators(loadOpenApiDocument()), quick: true, coerceTypes: true, customizeAjv: (ajv) => addFormats.default(ajv) });

beforeAll(async () => {
  app = await startTestApp({ BILLING_ENFORCEMENT: 'false', WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' }, { workers: true, stripe: true, cluster: { modelLoadMs: 20 } });
  [victim, intruder] = await Promise.all([verifiedUser(app), verifiedUser(app)]);
  const member = await invitedMember(app, victim, 'member');
  roles.member = member;
  [roles.admin, roles.viewer] = await Promise.all([invitedMember(app, victim, 'admin'), invitedMember(app, victim, 'viewer')]);
  const running = await deployment(app, victim, 'running');
  const key = await apiKey(victim, [running.id]);
  const { data: invitation } = await victim.api.POST('/v1/organization/invitations', { body: { email: `pending-${Date.now()}@example.com` } });
  await checkoutWithCard(app, victim, 'payment_method_setup');
  await waitUntil(async () => ((await victim.api.GET('/v1/billing/payment-methods')).data ?? []).length > 0, 'the victim’s card');
  const [card] = (await victim.api.GET('/v1/billing/payment-methods')).data ?? [];
  const [session] = (await victim.api.GET('/v1/user/sessions')).data ?? [];
  // The victim's webhook endpoint (no deployment event follows, so nothing is delivered to it).
  const { data: webhook } = await victim.api.POST('/v1/organization/webhook-endpoints', { body: { url: 'http://127.0.0.1:9/hooks' } });
  // The processor's webhooks for the card are processed before any digest is taken.
  await webhooksSettled(app);
  Object.assign(victims, {
    deployment_id: running.id,
    // GET /v1/models/{model}: a deployment id (or a model name) the caller may call.
    model: running.id,
    api_key_id: String(key.id),
    invitation_id: String(invitation?.id),
    user_id: String(member.user.id),
    session_id: session?.id ?? '',
    payment_method_id: card?.id ?? '',
    webhook_endpoint_id: webhook?.endpoint.id ?? '',
  });
  digest = await tableDigester(app.db, WRITTEN_ANYWAY);
  await requestValidator.init();
}, 120_000);
afterAll(() => app?.close());

const withIds = operations.filter(({ operation }) => (operation.parameters ?? []).some((p) => p.in === 'path'));
const pathNames = (operation: Operation) => (operation.parameters ?? []).filter((p) => p.in === 'path').map((p) => p.name);

describe('cross-organization access, on every operation that takes an id', () => {
  it('knows every path parameter of the document: a resource to reach for, or why there is none', () => {
    const unknown = withIds.flatMap(({ operation }) => pathNames(operation)).filter((name) => !(name in NOT_TENANT_OWNED) && !(name in victims));
    expect(unknown, 'add a victim resource for these path parameters (or say why they name none)').toEqual([]);
  });

  for (const { template, method, operation } of withIds.filter(({ operation }) => pathNames(operation).every((name) => !(name in NOT_TENANT_OWNED)))) {
    it(`${method.toUpperCase()} ${template} (${operation.operationId}) with another organization’s id`, async () => {
      const path = template.replace(/\{([^}]+)\}/g, (_, name: string) => encodeURIComponent(victims[name] ?? ''));
      const before = await digest();
      // The document's example body, which the request validator accepts: the refusal is the ownership check's, not validation's.
      const body = exampleBody(operation);
      const validation = requestValidator.validateRequest({ method, path, body: body === undefined ? undefined : JSON.parse(body), headers: { 'content-type': 'application/json' }, query: {} });
      expect(validation.errors ?? [], 'the example body and ids pass validation').toEqual([]);
      const response = await intruder.browser.fetch(path, { method: method.toUpperCase(), headers: { 'content-type': 'application/json' }, body });
      const text = await response.text();
      expect([403, 404], `${response.status} ${text}`).toContain(response.status);
      expect(text).not.toContain(victim.email);
      expect(changedTables(before, await digest())).toEqual([]);
    });
  }
});

const sessionWrites = operations.filter(
  ({ method, operation }) => method !== 'get' && (operation.security ?? document.security ?? []).some((requirement) => 'SessionCookie' in requirement && 'CsrfToken' in requirement),
);

describe('CSRF, on every state-changing operation that accepts the session', () => {
  it('covers the session writes of the document', () => {
    expect(sessionWrites.length).toBeGreaterThan(30);
  });

  for (const { template, method, operation } of sessionWrites) {
    it(`${method.toUpperCase()} ${template} (${operation.operationId}) without X-CSRF-Token: 403 CSRF_FAILED`, async () => {
      const path = template.replace(/\{([^}]+)\}/g, (_, name: string) => encodeURIComponent(victims[name] ?? '1'));
      const before = await digest();
      victim.browser.sendCsrfHeader = false;
      try {
        const response = await victim.browser.fetch(path, { method: method.toUpperCase(), headers: { 'content-type': 'application/json' }, body: method === 'delete' ? undefined : '{}' });
        expect(response.status).toBe(403);
        // A Problem's `code`, or the inference shape's `error.code`.
        const body = (await response.json()) as { code?: string; error?: { code?: string } };
        expect((body.code ?? body.error?.code)?.toUpperCase()).toBe('CSRF_FAILED');
      } finally {
        victim.browser.sendCsrfHeader = true;
      }
      expect(changedTables(before, await digest())).toEqual([]);
    });
  }
});

/** The roles of an organization, lowest first, as `x-required-role` names them. */
const RANKS = ['viewer', 'member', 'admin', 'super_admin'] as const;

describe('roles, on every operation that needs more than a role has', () => {
  const cases = operations.flatMap(({ template, method, operation }) => {
    const needed = RANKS.indexOf(operation['x-required-role'] as (typeof RANKS)[number]);
    return needed < 1 ? [] : RANKS.slice(0, needed).map((role) => ({ template, method, operation, role: role as InvitedRole }));
  });

  it('covers the operations above viewer', () => {
    expect(new Set(cases.map((c) => c.operation.operationId)).size).toBeGreaterThan(20);
  });

  for (const { template, method, operation, role } of cases) {
    it(`${method.toUpperCase()} ${template} (${operation.operationId}) as ${role}: 403 FORBIDDEN`, async () => {
      const caller = roles[role];
      if (!caller) throw new Error(`no ${role}`);
      const path = template.replace(/\{([^}]+)\}/g, (_, name: string) => encodeURIComponent(victims[name] ?? '1'));
      const before = await digest();
      const response = await caller.browser.fetch(path, { method: method.toUpperCase(), headers: { 'content-type': 'application/json' }, body: exampleBody(operation) });
      expect(response.status).toBe(403);
      const body = (await response.json()) as { code?: string; error?: { code?: string } };
      // A Problem's FORBIDDEN, or the inference shape's insufficient_role.
      expect(['FORBIDDEN', 'INSUFFICIENT_ROLE']).toContain((body.code ?? body.error?.code)?.toUpperCase());
      expect(changedTables(before, await digest())).toEqual([]);
    });
  }
});
