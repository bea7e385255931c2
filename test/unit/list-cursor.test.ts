import { describe, expect, it } from 'vitest';
import { Keyring } from '../../src/crypto.ts';
import { ListCursors } from '../../src/deployments/list-cursor.ts';
import { AppError } from '../../src/errors.ts';

const cursors = new ListCursors(new Keyring('a test APP_SECRET of at least 32 characters'));
const scope = { userId: 42, organizationId: 7 };
const position = { createdAt: '2026-11-20T09:30:00.123456Z', id: '0192f1c6-2b9e-7c4e-9b1a-5d0c8e6f7a21' };

/** The 422 a refused cursor answers, or undefined when it is read. */
function refusal(read: () => unknown) {
  try {
    read();
    return undefined;
  } catch (error) {
    return error instanceof AppError ? { status: error.status, code: error.code, location: error.errors?.[0]?.location } : error;
  }
}

describe('the deployment list cursor', () => {
  it('carries the position to the microsecond, and is short and URL-safe', () => {
    const cursor = cursors.write(scope, position);
    expect(cursor).toMatch(/^[A-Za-z0-9_-]{34}\.[A-Za-z0-9_-]{22}$/);
    expect(cursors.read(scope, cursor)).toEqual(position);
    for (const createdAt of ['1970-01-01T00:00:00.000001Z', '2026-12-31T23:59:59.999999Z', '2099-06-01T12:00:00.000000Z']) {
      expect(cursors.read(scope, cursors.write(scope, { ...position, createdAt })).createdAt).toBe(createdAt);
    }
  });

  it("refuses another user's or organization's cursor, one signed under another secret, and any altered one with 422 at query/after", () => {
    const cursor = cursors.write(scope, position);
    const refused = { status: 422, code: 'VALIDATION_FAILED', location: 'query/after' };
    expect(refusal(() => cursors.read({ userId: 43, organizationId: 7 }, cursor))).toEqual(refused);
    expect(refusal(() => cursors.read({ userId: 42, organizationId: 8 }, cursor))).toEqual(refused);
    expect(refusal(() => new ListCursors(new Keyring('another APP_SECRET of at least 32 characters')).read(scope, cursor))).toEqual(refused);
    for (let at = 0; at < cursor.length; at++) {
      const altered = `${cursor.slice(0, at)}${cursor[at] === 'A' ? 'B' : 'A'}${cursor.slice(at + 1)}`;
      expect(refusal(() => cursors.read(scope, altered)), altered).toEqual(refused);
    }
    for (const other of ['', '.', 'x', `${cursor}.`, `${cursor}x`, cursor.replace('.', '')]) expect(refusal(() => cursors.read(scope, other))).toEqual(refused);
  });
});
