import { constantTimeEqual, type Keyring } from '../crypto.ts';
import { AppError } from '../errors.ts';
import type { ListPosition, Scope } from './deployments.repository.ts';

/**
 * The opaque cursor of `GET /api/v1/model-deployments` (`after` in, `next_cursor` out): the position
 * after a page's last deployment (creation time to the microsecond, then id), bound by an HMAC to
 * the caller's user and organization. A malformed, altered or foreign cursor is refused with 422 at
 * `query/after`. The query is scoped to the caller whatever the cursor says, so a cursor carries a
 * position only. Layout and reasons:
 * docs/decisions/2026-11-25-paging-deployments-offset-and-keyset-cursor.md.
 */
const VERSION = 1;
const PAYLOAD_BYTES = 25;
const TAG_CHARS = 22;
const PURPOSE = 'deployment-list-cursor';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const POSITION_AT = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3})(\d{3})Z$/;

export class ListCursors {
  readonly #keyring: Keyring;

  constructor(keyring: Keyring) {
    this.#keyring = keyring;
  }

  /** The cursor of the position after which the scope's next page starts. */
  write(scope: Scope, position: ListPosition): string {
    const at = POSITION_AT.exec(position.createdAt);
    if (!at || !UUID.test(position.id)) throw new Error(`not a list position: ${position.createdAt} ${position.id}`);
    const payload = Buffer.alloc(PAYLOAD_BYTES);
    payload.writeUInt8(VERSION, 0);
    payload.writeBigInt64BE(BigInt(Date.parse(`${at[1]}Z`)) * 1000n + BigInt(at[2] as string), 1);
    Buffer.from(position.id.replaceAll('-', ''), 'hex').copy(payload, 9);
    const encoded = payload.toString('base64url');
    return `${encoded}.${this.#tag(scope, encoded)}`;
  }

  /** The position a cursor of this scope's list carries; 422 for any other string. */
  read(scope: Scope, cursor: string): ListPosition {
    const [encoded, tag, extra] = cursor.split('.');
    if (encoded === undefined || tag === undefined || extra !== undefined || !constantTimeEqual(tag, this.#tag(scope, encoded))) throw invalidCursor();
    const payload = Buffer.from(encoded, 'base64url');
    if (payload.length !== PAYLOAD_BYTES || payload.readUInt8(0) !== VERSION) throw invalidCursor();
    const micros = payload.readBigInt64BE(1);
    const millis = micros / 1000n;
    const createdAt = new Date(Number(millis));
    if (micros < 0n || Number.isNaN(createdAt.getTime())) throw invalidCursor();
    const hex = payload.subarray(9).toString('hex');
    return {
      createdAt: `${createdAt.toISOString().slice(0, 23)}${String(micros % 1000n).padStart(3, '0')}Z`,
      id: `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`,
    };
  }

  #tag(scope: Scope, encoded: string): string {
    return this.#keyring.sign(PURPOSE, `${VERSION}:${scope.userId}:${scope.organizationId}:${encoded}`).slice(0, TAG_CHARS);
  }
}

function invalidCursor(): AppError {
  return new AppError('VALIDATION_FAILED', 'The cursor `after` is not one this list gave you: pass the `next_cursor` of a previous page unchanged.', {
    errors: [
      {
        location: 'query/after',
        message: 'is not a cursor of your deployment list (malformed or altered, or from the list of another user or organization)',
      },
    ],
  });
}
