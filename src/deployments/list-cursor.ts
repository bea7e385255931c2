import { constantTimeEqual, type Keyring } from '../crypto.ts';
import { AppError } from '../errors.ts';
import type { ListPosition, Scope } from './deployments.repository.ts';

/**
 * The opaque cursor of `GET /api/v1/model-deployments` (`after` in, `next_cursor` out): the position
 * after a page's last deployment (its creation time to the microsecond and its id), bound by an HMAC
 * to the list it came from (the user and organization of the caller who got it).
 *
 * Layout: base64url of 25 bytes (a version byte, the creation time as microseconds since the Unix
 * epoch in a signed 64-bit big-endian integer, the id's 16 bytes), a dot, and the first 22
 * characters (132 bits) of the base64url HMAC-SHA-256 under the key `deployment-list-cursor`
 * derived from APP_SECRET, over the version, the user, the organization and the payload.
 *
 * A cursor that is malformed, altered, or issued for another user's or organization's list (or
 * under another APP_SECRET) is refused with 422 `VALIDATION_FAILED` at `query/after`. The query is
 * scoped to the caller whatever the cursor says, so a cursor carries a position only: it can
 * neither show nor reach another tenant's rows. A cursor does not expire; the deployment it points
 * after need not exist any more.
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
