import { constantTimeEqual, type Keyring } from '../crypto.ts';
import { AppError } from '../errors.ts';
import type { CatalogFilter, CatalogPosition } from './catalog.repository.ts';

/**
 * The opaque cursor of `GET /api/v1/deployable-models` (`after` in, `next_cursor` out): the position
 * after a page's last model in the list's order (search rank with `q`, `sort_order`, `display_name`,
 * id), bound by an HMAC to the caller and the query (`enabled_only`, `model_type`, `provider`, `q`),
 * so a cursor sent with other filters is refused (422 at `query/after`) rather than starting a page
 * in another list. It does not expire. Layout and reasons:
 * docs/decisions/2026-11-28-catalog-paging-and-llms-by-default.md.
 */
const VERSION = 1;
const TAG_CHARS = 22;
const PURPOSE = 'catalog-list-cursor';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Whose list, of which query: what a cursor is bound to. */
export interface CatalogListScope {
  userId: number;
  filter: CatalogFilter;
}

export class CatalogCursors {
  readonly #keyring: Keyring;

  constructor(keyring: Keyring) {
    this.#keyring = keyring;
  }

  /** The cursor of the position after which the list's next page starts. */
  write(scope: CatalogListScope, position: CatalogPosition): string {
    const encoded = Buffer.from(JSON.stringify([position.rank, position.sortOrder, position.displayName, position.id])).toString('base64url');
    return `${encoded}.${this.#tag(scope, encoded)}`;
  }

  /** The position a cursor of this list carries; 422 for any other string. */
  read(scope: CatalogListScope, cursor: string): CatalogPosition {
    const [encoded, tag, extra] = cursor.split('.');
    if (encoded === undefined || tag === undefined || extra !== undefined || !constantTimeEqual(tag, this.#tag(scope, encoded))) throw invalidCursor();
    const fields = jsonOf(encoded);
    if (!Array.isArray(fields) || fields.length !== 4) throw invalidCursor();
    const [rank, sortOrder, displayName, id] = fields as unknown[];
    const rankFits = scope.filter.terms === undefined ? rank === null : typeof rank === 'number' && Number.isFinite(rank);
    if (!rankFits || !Number.isSafeInteger(sortOrder) || typeof displayName !== 'string' || typeof id !== 'string' || !UUID.test(id)) throw invalidCursor();
    return { rank: rank as number | null, sortOrder: sortOrder as number, displayName, id };
  }

  #tag(scope: CatalogListScope, encoded: string): string {
    const { organizationId, enabledOnly, modelType, provider, terms } = scope.filter;
    const list = JSON.stringify([VERSION, scope.userId, organizationId, enabledOnly, modelType ?? null, provider?.toLowerCase() ?? null, terms ?? null]);
    return this.#keyring.sign(PURPOSE, `${list}:${encoded}`).slice(0, TAG_CHARS);
  }
}

function jsonOf(encoded: string): unknown {
  try {
    return JSON.parse(Buffer.from(encoded, 'base64url').toString('utf8'));
  } catch {
    return undefined;
  }
}

function invalidCursor(): AppError {
  return new AppError('VALIDATION_FAILED', 'The cursor `after` is not one this list gave you: pass the `next_cursor` of a previous page unchanged, with the same filters and `q`.', {
    errors: [
      {
        location: 'query/after',
        message: 'is not a cursor of this catalog list (malformed or altered, or from a list with other filters, or of another user or organization)',
      },
    ],
  });
}
