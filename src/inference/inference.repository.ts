import type { Knex } from 'knex';
import type pg from 'pg';
import { DeploymentRow, notTerminatedSql } from '../db/models/deployments.ts';
import { SERVING } from '../deployments/deployment-states.ts';
import type { UsageRecordRow } from '../db/models/usage-records.ts';

/** Every query of the inference area: what a caller may route to, and the usage records. */
type Db = Knex | Knex.Transaction;

/** A replica a request may be sent to: its id and the engine's id of its model. */
export interface ReadyReplica {
  id: string;
  engine_model_uid: string;
}

/** A deployment of the caller's organization with its cluster and its ready replicas, as routing sees it. */
export interface Candidate {
  id: string;
  organization_id: number;
  user_id: number;
  model_name: string;
  status: string;
  /** Its replicas in `ready`, by ordinal (none unless it is running). */
  replicas: ReadyReplica[];
  cluster_id: string | null;
  endpoint: string | null;
  sealed_credential: string | null;
  /** The cluster's status: `credentials_invalid` once its engine refused the platform's credentials. */
  cluster_status: string | null;
  created_at: Date;
}

/** Whose deployments: a session's (its user's, in its organization) or a whole organization's (an API key's). */
export type CandidateScope = { userId: number; organizationId: number } | { organizationId: number };

/**
 * The scope's deployments that are not terminated, with their clusters, newest first: the
 * organization's from the partial index `deployments_live_by_organization` (the user's among them
 * for a session, or from `deployments_by_owner` when the planner judges that smaller). A running
 * one's ready replicas come in the same query, from the replicas' (deployment, ordinal) key; the
 * others' replicas are not looked up.
 */
export async function findRoutingCandidates(db: Db, scope: CandidateScope): Promise<Candidate[]> {
  const query = DeploymentRow.query(db)
    .alias('d')
    .leftJoin('clusters as c', 'c.id', 'd.cluster_id')
    .whereRaw(notTerminatedSql('d'))
    .where('d.organization_id', scope.organizationId)
    .select(
      'd.id',
      'd.organization_id',
      'd.user_id',
      'd.model_name',
      'd.status',
      db.raw(READY_REPLICAS),
      'd.cluster_id',
      'd.created_at',
      'c.endpoint',
      'c.sealed_credential',
      'c.status as cluster_status',
    )
    .orderBy('d.created_at', 'desc');
  if ('userId' in scope) query.where('d.user_id', scope.userId);
  return query.castTo<Candidate[]>();
}

/** A candidate's ready replicas as a JSON array (`ReadyReplica`), looked up only for a running deployment. */
const READY_REPLICAS = `case when d.status = '${SERVING}' then
    coalesce((select json_agg(json_build_object('id', r.id, 'engine_model_uid', r.engine_model_uid) order by r.ordinal)
              from deployment_replicas r where r.deployment_id = d.id and r.status = 'ready'), '[]'::json)
  else '[]'::json end as replicas`;

/** The columns of a usage record the service writes (the rest are the database's). */
export type NewUsageRecord = Pick<
  UsageRecordRow,
  | 'usage_id'
  | 'request_id'
  | 'organization_id'
  | 'deployment_id'
  | 'api_key_id'
  | 'user_id'
  | 'route'
  | 'model'
  | 'prompt_tokens'
  | 'completion_tokens'
  | 'total_tokens'
  | 'unit'
  | 'outcome'
  | 'estimated'
> & {
  quantity: number;
  /** A Date, or its ISO text (as the recorder makes it, formatted once: the row is written as JSON). */
  created_at: Date | string;
};

/**
 * Stores usage records; one already stored under the same `usage_id` is left as it is. The service
 * writes them on a pool whose commits do not wait for the WAL to reach the disk
 * (`synchronous_commit = off`, src/runtime.ts): an answer's last bytes wait for its usage (the group
 * commit), and a disk flush would cost more than the answer's own overhead. A killed API process
 * loses nothing this way; a crash of Postgres itself may lose the last fraction of a second of usage
 * records (its WAL writer flushes every 200 ms).
 */
export async function insertUsageRecords(db: Knex, records: readonly NewUsageRecord[]): Promise<void> {
  if (records.length) await insertUsageJson(db, usageJson(records.map((record) => JSON.stringify(record))));
}

/** The JSON array of records whose JSON texts are `lines` (as the recorder and its journal hold them). */
export function usageJson(lines: readonly string[]): string {
  return `[${lines.join(',')}]`;
}

async function insertUsageJson(db: Knex, json: string): Promise<void> {
  const connection = (await db.client.acquireConnection()) as pg.Client;
  try {
    await insertOn(connection, json);
  } finally {
    await db.client.releaseConnection(connection);
  }
}

/**
 * `insertUsageRecords` for the usage recorder: while it holds (`hold`, the service's running
 * recorder), one connection of the pool is kept between writes. The usage of an answer is written
 * while its last bytes wait (the group commit), and taking and giving back a pooled connection for
 * each write cost about 70 µs of CPU and of latency per request at one connection (tarn's
 * bookkeeping; measured interleaved, 10,000 single-record writes). A connection that failed is
 * given back (the pool drops it) and the next write takes another. One write at a time (the
 * recorder's flushes run one after the other).
 */
export class UsageWriter {
  readonly #db: Knex;
  #holding = false;
  #held: Promise<pg.Client> | undefined;

  constructor(db: Knex) {
    this.#db = db;
  }

  /** Keeps a connection between writes from now on, until `release`. */
  hold(): void {
    this.#holding = true;
  }

  /** Stores the records of `json`, a JSON array of them (`usageJson`). */
  async insert(json: string): Promise<void> {
    if (!this.#holding) return insertUsageJson(this.#db, json);
    let connection = await (this.#held ??= this.#acquire());
    // Closed while it waited (knex marks it): another one.
    if ((connection as { __knex__disposed?: unknown }).__knex__disposed) {
      await this.#giveBack();
      connection = await (this.#held ??= this.#acquire());
    }
    try {
      await insertOn(connection, json);
    } catch (error) {
      await this.#giveBack();
      throw error;
    }
  }

  /** Gives the held connection back to the pool and holds none any more (before the pool is destroyed). */
  async release(): Promise<void> {
    this.#holding = false;
    await this.#giveBack();
  }

  async #giveBack(): Promise<void> {
    const held = this.#held;
    this.#held = undefined;
    const connection = await held?.catch(() => undefined);
    if (connection) await this.#db.client.releaseConnection(connection);
  }

  #acquire(): Promise<pg.Client> {
    const acquired = this.#db.client.acquireConnection() as Promise<pg.Client>;
    acquired.catch(() => (this.#held = undefined));
    return acquired;
  }
}

/**
 * One statement of constant text whatever the batch's size, its records as one JSON parameter,
 * prepared once per connection (a named statement), sent on the connection as it is. The query
 * builder's per-record work was a tenth of the proxy's CPU at 64 connections; an array per column
 * cost about 10 µs of CPU per record (each element escaped, each date formatted) against 7 for the
 * JSON text, and planning the insert into the partitioned table on every write took 0.18 ms of the
 * 0.42 ms a single-record write waits (measured interleaved, 2,700 writes of each kind). Keys of a
 * record that are not among the columns are ignored.
 */
async function insertOn(connection: pg.Client, json: string): Promise<void> {
  await connection.query({ ...INSERT_USAGE, values: [json] });
}

const USAGE_COLUMNS = [
  'usage_id',
  'request_id',
  'organization_id',
  'deployment_id',
  'api_key_id',
  'user_id',
  'route',
  'model',
  'prompt_tokens',
  'completion_tokens',
  'total_tokens',
  'unit',
  'quantity',
  'outcome',
  'estimated',
  'created_at',
] as const satisfies ReadonlyArray<keyof NewUsageRecord>;
const INSERT_USAGE = {
  name: 'insert_usage_records',
  text: `insert into usage_records (${USAGE_COLUMNS.join(', ')})
  select ${USAGE_COLUMNS.join(', ')} from json_populate_recordset(null::usage_records, $1::json)
  on conflict (usage_id, created_at) do nothing`,
};
