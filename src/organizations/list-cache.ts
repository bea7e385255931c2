import type { Knex } from 'knex';
import { markReused } from '../http/reused-body.ts';
import { listVersionOf, type VersionedList } from './organizations.repository.ts';

/** The whole-list routes whose large answers are kept (each read once per change it shows). */
export type OrganizationList = 'invitations' | 'api-keys' | 'deployment-options';

/** Each list's version, as `organization_list_versions` names it. */
const VERSION_OF: Record<OrganizationList, VersionedList> = { invitations: 'invitations', 'api-keys': 'api_keys', 'deployment-options': 'deployment_options' };

/** A list's answer as its loader read it, its number of items, and until when it reads the same if nothing changes. */
export interface LoadedList<B extends object> {
  body: B;
  size: number;
  /** Epoch ms at which an item's status lapses by itself (an invitation's expiry); none when unset. */
  validUntil?: number;
}

interface Entry {
  version: string;
  validUntil: number;
  body: object;
  size: number;
}

/** Lists kept at most, in items of all entries (a heavy organization's 2,001 invitations are ~2 MB of objects). */
const MAX_ITEMS = 50_000;

/** Organizations remembered as having a large list, so that their next read is versioned. */
const MAX_LARGE = 1_000;

/**
 * The large whole-list answers of organizations, kept per process and reused while the list's
 * version (`organization_list_versions`, one per organization and list, raised at the commit of
 * every change that list shows: a deployment's status raises the deployment options, and the keys
 * only when a key's scope names it) is unchanged and no item's status has lapsed. A reuse costs one
 * primary-key read. The version is read before the list, so a list is never kept under an older
 * version than a change it shows. A list that logs its changes (the deployment options, whose
 * version every status change raises) is patched from the kept copy with the items that changed
 * since its version. A kept body is shared, never changed, and serialized once (`markReused`).
 * Measurements and rules: docs/performance.md, Data at scale.
 */
export class OrganizationListCache {
  readonly #db: Knex;
  readonly #minItems: number;
  readonly #entries = new Map<string, Entry>();
  readonly #large = new Set<string>();
  #items = 0;

  constructor(db: Knex, options: { minItems: number }) {
    this.#db = db;
    this.#minItems = options.minItems;
  }

  /**
   * The list's answer: kept while its version holds; otherwise `patch`ed from the kept one when the
   * list can say what changed between two versions (undefined from it: read whole), or `load`ed.
   */
  async get<B extends object>(
    organizationId: number,
    list: OrganizationList,
    load: () => Promise<LoadedList<B>>,
    patch?: (kept: B, from: string, to: string) => Promise<LoadedList<B> | undefined>,
  ): Promise<B> {
    const key = `${list}:${organizationId}`;
    if (!this.#large.has(key)) {
      const { body, size } = await load();
      if (size >= this.#minItems) this.#remember(key);
      return body;
    }
    const version = await listVersionOf(this.#db, organizationId, VERSION_OF[list]);
    const entry = this.#entries.get(key);
    if (entry && entry.version === version && Date.now() < entry.validUntil) {
      // Most recently used last: the first entries are the ones evicted.
      this.#entries.delete(key);
      this.#entries.set(key, entry);
      return entry.body as B;
    }
    const fresh = entry && Date.now() < entry.validUntil;
    const { body, size, validUntil = Infinity } = (fresh && (await patch?.(entry.body as B, entry.version, version))) || (await load());
    this.#drop(key);
    if (size >= this.#minItems && size <= MAX_ITEMS) this.#keep(key, { version, validUntil, body: markReused(body), size });
    return body;
  }

  #remember(key: string): void {
    if (this.#large.size >= MAX_LARGE) this.#large.delete(this.#large.values().next().value as string);
    this.#large.add(key);
  }

  #keep(key: string, entry: Entry): void {
    this.#entries.set(key, entry);
    this.#items += entry.size;
    for (const [oldest] of this.#entries) {
      if (this.#items <= MAX_ITEMS) break;
      this.#drop(oldest);
    }
  }

  #drop(key: string): void {
    const entry = this.#entries.get(key);
    if (!entry) return;
    this.#entries.delete(key);
    this.#items -= entry.size;
  }
}
