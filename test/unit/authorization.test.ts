import { describe, expect, it } from 'vitest';
import type { SessionPrincipal } from '../../src/accounts/principal.ts';
import { authorize } from '../../src/http/authorization.ts';
import type { OperationId } from '../../src/http/types.ts';

const principal = (role: SessionPrincipal['role']): SessionPrincipal => ({
  kind: 'session',
  sessionId: 'id',
  expiresAt: new Date(),
  createdAt: new Date(),
  authMethod: 'password',
  user: { id: 1, email: 'ada@example.com', name: 'Ada', emailVerified: true },
  organization: { id: 1, name: 'Org' },
  role,
});

describe('authorize', () => {
  it('fails closed: a session caller of an operation with no role is refused, whatever their role', () => {
    expect(() => authorize('notInTheTable' as OperationId, principal('super_admin'))).toThrow(/no role in REQUIRED_ROLE/);
    expect(() => authorize('toString' as OperationId, principal('super_admin'))).toThrow(/no role in REQUIRED_ROLE/);
  });

  it('refuses a role below the operation’s with 403 FORBIDDEN and lets the role through', () => {
    expect(() => authorize('updateMemberRole', principal('member'))).toThrow(expect.objectContaining({ code: 'FORBIDDEN' }));
    expect(() => authorize('updateMemberRole', principal('admin'))).not.toThrow();
  });

  it('lets any member call removeMember, whose service refuses removing others below admin', () => {
    expect(() => authorize('removeMember', principal('viewer'))).not.toThrow();
  });
});
