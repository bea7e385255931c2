import { describe, expect, it } from 'vitest';
import type { SessionPrincipal } from '../../src/principal.ts';
import { authorize } from '../../src/http/authorization.ts';
import { readOperationRules, type OperationRules } from '../../src/http/operations.ts';
import type { OperationId } from '../../src/http/types.ts';
import { loadOpenApiDocument } from '../../src/openapi-document.ts';

const principal = (role: SessionPrincipal['role'], organization: SessionPrincipal['organization'] = { id: 1, name: 'Org' }): SessionPrincipal => ({
  kind: 'session',
  sessionId: 'id',
  expiresAt: new Date(),
  createdAt: new Date(),
  authMethod: 'password',
  user: { id: 1, email: 'ada@example.com', name: 'Ada', emailVerified: true },
  organization,
  role,
});

const rules = readOperationRules(loadOpenApiDocument());
const operation = (id: OperationId) => rules.get(id) as OperationRules;

describe('authorize', () => {
  it('fails closed: a session caller of an operation with no role is refused, whatever their role', () => {
    const unstated = { operationId: 'getExtra' as OperationId, requiredRole: undefined };
    expect(() => authorize(unstated, principal('super_admin'))).toThrow(/getExtra accepts a session but has no x-required-role/);
  });

  it('refuses a role below the operation’s with 403 FORBIDDEN and lets the role through', () => {
    expect(() => authorize(operation('updateMemberRole'), principal('member'))).toThrow(expect.objectContaining({ code: 'FORBIDDEN' }));
    expect(() => authorize(operation('updateMemberRole'), principal('admin'))).not.toThrow();
  });

  it('refuses a caller without an organization with 403 FORBIDDEN on a viewer route, and lets them reach their own routes', () => {
    expect(() => authorize(operation('listDeployments'), principal(null, null))).toThrow(expect.objectContaining({ code: 'FORBIDDEN' }));
    expect(() => authorize(operation('getSession'), principal(null, null))).not.toThrow();
  });

  it('lets any member call removeMember, whose service refuses removing others below admin', () => {
    expect(() => authorize(operation('removeMember'), principal('viewer'))).not.toThrow();
  });
});
