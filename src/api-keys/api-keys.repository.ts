import type { Knex } from 'knex';
import { ApiKeyDeploymentRow } from '../db/models/api-key-deployments.ts';
import { ApiKeyRow } from '../db/models/api-keys.ts';
import { type DeploymentRow, notTerminatedSql } from '../db/models/deployments.ts';
import { isoTimes, utcTextSql } from '../db/query.ts';
import type { LimitColumns } from './key-limits.ts';

/** Every query of the API keys area: keys, their scopes, and the deployments a scope may name. */
type Db = Knex | Knex.Transaction;

/** A deployment as a key's scope shows it. */
export interface ScopedDeployment {
  id: string;
  model_name: string;
  status: DeploymentRow['status'];
}

/** What authenticating a key needs: its state and its scope. */
export interface KeyState {
  id: number;
  organization_id: number;
  key_hash: string;
  status: ApiKeyRow['status'];
  expires_at: Date | null;
  allow_hosted_models: boolean;
  deployment_ids: string[];
  /** The key's own limits. */
  own: LimitColumns;
  /** Its organization's defaults; null when it has set none. */
  defaults: LimitColumns | null;
}

const LIMIT_COLUMNS = ['requests_per_minute', 'tokens_per_minute', 'monthly_token_budget', 'monthly_spend_budget'] as const;

/** The limit columns of `table` as one JSON object (amounts as text, as Postgres reads them in a row). */
function limitsObject(table: string): string {
  return `json_build_object(${LIMIT_COLUMNS.map((c) => `'${c}', ${table}.${c}${c === 'monthly_spend_budget' ? '::text' : ''}`).join(', ')})`;
}

/** A key as the API shows it (without its scope): its times as the API writes them. */
export type ApiKeyView = Pick<ApiKeyRow, 'id' | 'organization_id' | 'created_by_user_id' | 'name' | 'key_prefix' | 'status' | 'allow_hosted_models'> &
  LimitColumns & { expires_at: string | null; last_used_at: string | null; revoked_at: string | null; created_at: string };

const KEY_TIMES = ['expires_at', 'last_used_at', 'revoked_at', 'created_at'] as const satisfies ReadonlyArray<keyof ApiKeyView>;

/**
 * Keys as views: plain rows, times read as UTC text (`utcTextSql`, turned into the API's form by
 * `isoTimes`): an organization lists a thousand keys, and parsing each time into a Date and writing
 * it back cost more than the rest of the row.
 */
function keyViews(db: Db) {
  return db('api_keys').select(
    'id',
    'organization_id',
    'created_by_user_id',
    'name',
    'key_prefix',
    'status',
    'allow_hosted_models',
    ...LIMIT_COLUMNS,
    ...KEY_TIMES.map((column) => db.raw(utcTextSql(column, column))),
  );
}

/** The organization's keys, newest first. */
export async function listKeysOf(db: Db, organizationId: number): Promise<ApiKeyView[]> {
  const rows = await keyViews(db)
    .where({ organization_id: organizationId })
    .orderBy([
      { column: 'created_at', order: 'desc' },
      { column: 'id', order: 'desc' },
    ]);
  return isoTimes(rows, KEY_TIMES);
}

/** The keys with these ids, in no particular order. */
export async function findKeyViews(db: Db, ids: readonly number[]): Promise<ApiKeyView[]> {
  return isoTimes(await keyViews(db).whereIn('id', ids), KEY_TIMES);
}

export async function findKey(db: Db, organizationId: number, keyId: number, options: { forUpdate?: boolean } = {}): Promise<ApiKeyRow | undefined> {
  const query = ApiKeyRow.query(db).where({ id: keyId, organization_id: organizationId });
  return options.forUpdate ? query.forUpdate().first() : query.first();
}

export async function insertKey(
  db: Db,
  key: Pick<ApiKeyRow, 'organization_id' | 'created_by_user_id' | 'name' | 'key_prefix' | 'key_hash' | 'expires_at' | 'allow_hosted_models'> & Partial<LimitColumns>,
): Promise<ApiKeyRow> {
  return ApiKeyRow.query(db).insert(key).returning('*');
}

/** The key after the changes (as it is when there are none). */
export async function updateKey(
  db: Db,
  key: ApiKeyRow,
  changes: Partial<Pick<ApiKeyRow, 'name' | 'expires_at' | 'status' | 'allow_hosted_models'> & LimitColumns>,
): Promise<ApiKeyRow> {
  if (!Object.keys(changes).length) return key;
  const [row] = await ApiKeyRow.query(db).where({ id: key.id }).patch(changes).returning('*');
  return row ?? key;
}

/** Revokes the organization's key (keeping the first revocation time); undefined when it has none such. */
export async function revokeKey(db: Db, organizationId: number, keyId: number): Promise<ApiKeyRow | undefined> {
  const [row] = await ApiKeyRow.query(db)
    .where({ id: keyId, organization_id: organizationId })
    .patch({ status: 'revoked', revoked_at: db.raw('coalesce(revoked_at, now())') })
    .returning('*');
  return row;
}

/** Revokes the keys the user created in the organization that are not revoked yet; their ids. */
export async function revokeKeysCreatedBy(db: Db, organizationId: number, userId: number): Promise<number[]> {
  const rows = await ApiKeyRow.query(db)
    .where({ organization_id: organizationId, created_by_user_id: userId })
    .whereNot({ status: 'revoked' })
    .patch({ status: 'revoked', revoked_at: db.raw('coalesce(revoked_at, now())') })
    .returning('id');
  return rows.map((row) => row.id);
}

/** Replaces a key's scope. */
export async function setScope(db: Db, keyId: number, deploymentIds: readonly string[], options: { replace: boolean }): Promise<void> {
  if (options.replace) await ApiKeyDeploymentRow.query(db).where({ api_key_id: keyId }).delete();
  if (deploymentIds.length) await ApiKeyDeploymentRow.query(db).insert(deploymentIds.map((deployment_id) => ({ api_key_id: keyId, deployment_id })));
}

/** How many deployments the key is scoped to. */
export async function scopeSize(db: Db, keyId: number): Promise<number> {
  return ApiKeyDeploymentRow.query(db).where({ api_key_id: keyId }).resultSize();
}

/** The scoped deployments of each key, oldest deployment first. */
export async function scopesOf(db: Db, keyIds: readonly number[]): Promise<Array<ScopedDeployment & { api_key_id: number }>> {
  if (!keyIds.length) return [];
  return scopes(db).whereIn('s.api_key_id', keyIds);
}

/**
 * The scoped deployments of every key of the organization, oldest deployment first: from its keys
 * (`api_keys_organization`), their scopes and each deployment by primary key. Named by
 * organization rather than by a list of thousands of key ids, whose `in (…)` the planner answered
 * with a sequential scan of deployments (250 ms at a million deployments, docs/scaling.md).
 */
export async function scopesInOrganization(db: Db, organizationId: number): Promise<Array<ScopedDeployment & { api_key_id: number }>> {
  return scopes(db).join('api_keys as k', 'k.id', 's.api_key_id').where('k.organization_id', organizationId);
}

function scopes(db: Db) {
  return db('api_key_deployments as s').join('deployments as d', 'd.id', 's.deployment_id').orderBy('d.created_at').select('s.api_key_id', 'd.id', 'd.model_name', 'd.status');
}

/**
 * The organization's deployments a key may be scoped to (all but terminated ones), newest first;
 * only `ids` when given. Read from the partial index `deployments_live_by_organization`, whose
 * predicate the query names as a literal.
 */
export async function scopableDeployments(db: Db, organizationId: number, ids?: readonly string[]): Promise<ScopedDeployment[]> {
  // Plain rows: the heavy organization offers a thousand.
  const query = db('deployments')
    .where({ organization_id: organizationId })
    .whereRaw(notTerminatedSql())
    .orderBy([
      { column: 'created_at', order: 'desc' },
      { column: 'id', order: 'desc' },
    ])
    .select('id', 'model_name', 'status');
  if (ids) query.whereIn('id', ids);
  return query;
}

/**
 * The deployments whose options changed after version `from` up to `to` (migration
 * 20261205000000_deployment_option_changes): each as the options now show it, or null when it left
 * them (terminated, deleted, moved to another organization). Undefined when the whole list must be
 * read again: a deployment joined it, or the log (its last 1,000 versions) no longer holds every
 * version of the range.
 */
export async function deploymentOptionChanges(db: Db, organizationId: number, from: string, to: string): Promise<Map<string, ScopedDeployment | null> | undefined> {
  const versions = Number(to) - Number(from);
  if (versions <= 0) return undefined;
  const rows = (await db('deployment_option_changes as c')
    .joinRaw(`left join deployments as d on d.id = c.deployment_id and d.organization_id = c.organization_id and ${notTerminatedSql('d')}`)
    .where('c.organization_id', organizationId)
    .where('c.version', '>', from)
    .where('c.version', '<=', to)
    .select('c.version', 'c.deployment_id', 'd.id', 'd.model_name', 'd.status')) as Array<{ version: string; deployment_id: string | null; id: string | null } & Omit<ScopedDeployment, 'id'>>;
  if (new Set(rows.map((row) => row.version)).size !== versions || rows.some((row) => row.deployment_id === null)) return undefined;
  const changes = new Map<string, ScopedDeployment | null>();
  for (const { deployment_id, id, model_name, status } of rows) changes.set(deployment_id as string, id ? { id, model_name, status } : null);
  return changes;
}

/** The state and scope of the key with this hash, or undefined. */
export async function findKeyState(db: Db, keyHash: string): Promise<KeyState | undefined> {
  return ApiKeyRow.query(db)
    .alias('k')
    .leftJoin('api_key_deployments as s', 's.api_key_id', 'k.id')
    .where('k.key_hash', keyHash)
    .leftJoin('api_key_limit_defaults as d', 'd.organization_id', 'k.organization_id')
    .groupBy('k.id', 'd.organization_id')
    .select(
      'k.id',
      'k.organization_id',
      'k.key_hash',
      'k.status',
      'k.expires_at',
      'k.allow_hosted_models',
      db.raw('array_remove(array_agg(s.deployment_id), null) as deployment_ids'),
      db.raw(`${limitsObject('k')} as own`),
      db.raw(`case when d.organization_id is null then null else ${limitsObject('d')} end as defaults`),
    )
    .first()
    .castTo<KeyState | undefined>();
}

/** Records that the key was used, unless that was recorded in the last minute. */
export async function touchKey(db: Db, keyId: number): Promise<void> {
  await ApiKeyRow.query(db)
    .findById(keyId)
    .where((q) => q.whereNull('last_used_at').orWhere('last_used_at', '<', db.raw("now() - interval '1 minute'")))
    .patch({ last_used_at: db.fn.now() });
}

/** The organization's default key limits; undefined when it has set none. */
export async function findLimitDefaults(db: Db, organizationId: number): Promise<LimitColumns | undefined> {
  return db('api_key_limit_defaults').where({ organization_id: organizationId }).first(...LIMIT_COLUMNS);
}

/** Sets (replaces) the organization's default key limits. */
export async function saveLimitDefaults(db: Db, organizationId: number, limits: LimitColumns): Promise<LimitColumns> {
  const [row] = await db('api_key_limit_defaults')
    .insert({ organization_id: organizationId, ...limits })
    .onConflict('organization_id')
    .merge({ ...limits, updated_at: db.fn.now() })
    .returning([...LIMIT_COLUMNS]);
  return row as LimitColumns;
}
