import { describe, expect, it } from 'vitest';
import { AppError } from '../../src/errors.ts';
import { assertAnswerable, isUnanswered, lapsedSql, openSql, statusAt, statusSql } from '../../src/invitations/invitation-status.ts';

const NOW = new Date('2026-11-23T12:00:00Z');
const before = new Date(NOW.getTime() - 1);
const after = new Date(NOW.getTime() + 1);

function codeOf(run: () => void): string | undefined {
  try {
    run();
    return undefined;
  } catch (error) {
    return error instanceof AppError ? error.code : 'not an AppError';
  }
}

describe('the status of an invitation', () => {
  it('reads a pending invitation past its expiry as expired, at the very instant too', () => {
    expect(statusAt({ status: 'pending', expires_at: before }, NOW)).toBe('expired');
    expect(statusAt({ status: 'pending', expires_at: NOW }, NOW)).toBe('expired');
  });

  it('reads a pending invitation before its expiry as pending', () => {
    expect(statusAt({ status: 'pending', expires_at: after }, NOW)).toBe('pending');
  });

  it.each(['accepted', 'rejected', 'revoked', 'expired'] as const)('keeps %s whatever the expiry', (status) => {
    expect(statusAt({ status, expires_at: before }, NOW)).toBe(status);
    expect(statusAt({ status, expires_at: after }, NOW)).toBe(status);
  });

  it('writes the same rule in SQL, over the table alias given', () => {
    expect(statusSql('i')).toBe(`case when i.status = 'pending' and i.expires_at <= now() then 'expired' else i.status end`);
    expect(openSql('i')).toBe(`i.status = 'pending' and i.expires_at > now()`);
    expect(lapsedSql('invitations')).toBe(`invitations.status = 'pending' and invitations.expires_at <= now()`);
  });

  it('lets an invitation be answered only while it reads as pending: 410 once expired, 409 once answered', () => {
    expect(codeOf(() => assertAnswerable({ status: 'pending', expires_at: after }, NOW))).toBeUndefined();
    expect(codeOf(() => assertAnswerable({ status: 'pending', expires_at: before }, NOW))).toBe('INVITATION_EXPIRED');
    expect(codeOf(() => assertAnswerable({ status: 'expired', expires_at: after }, NOW))).toBe('INVITATION_EXPIRED');
    expect(codeOf(() => assertAnswerable({ status: 'accepted', expires_at: after }, NOW))).toBe('INVITATION_NOT_PENDING');
    expect(codeOf(() => assertAnswerable({ status: 'revoked', expires_at: before }, NOW))).toBe('INVITATION_NOT_PENDING');
  });

  it('lets the organization resend or revoke only what nobody answered', () => {
    expect(isUnanswered({ status: 'pending' })).toBe(true);
    expect(isUnanswered({ status: 'expired' })).toBe(true);
    for (const status of ['accepted', 'rejected', 'revoked'] as const) expect(isUnanswered({ status })).toBe(false);
  });
});
