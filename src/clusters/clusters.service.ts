import type { Knex } from 'knex';
import { XinferenceClient } from '../adapters/xinference.ts';
import type { Keyring } from '../crypto.ts';

const SEAL = 'cluster-credential';

export interface ClusterRegistration {
  name: string;
  provider: string;
  region: string;
  /** The serving-engine supervisor's base URL. */
  endpoint: string;
  /** The supervisor's API key; sealed at rest, never shown again. */
  apiKey?: string;
  /** The platform's shared cluster for hosted models. */
  hosted?: boolean;
}

export interface ClusterRow {
  id: string;
  name: string;
  provider: string;
  region: string;
  endpoint: string;
  sealed_credential: string | null;
  status: string;
  hosted: boolean;
}

export interface SyncResult {
  instances: Array<{ worker: string; instanceType: string; gpus: number }>;
  unmatched: Array<{ worker: string; reason: string }>;
  unavailable: string[];
}

/**
 * The registry of GPU clusters: registering one (its supervisor credential sealed with the server
 * key), syncing its instances from the engine's inventory, and the engine client of each.
 */
export class ClustersService {
  readonly #db: Knex;
  readonly #keyring: Keyring;
  readonly #clients = new Map<string, { endpoint: string; sealed: string | null; client: XinferenceClient }>();
  readonly #headers = new Map<string, string>();

  constructor(deps: { db: Knex; keyring: Keyring }) {
    this.#db = deps.db;
    this.#keyring = deps.keyring;
  }

  /** Adds a cluster, or updates the one of that name. */
  async register(input: ClusterRegistration): Promise<ClusterRow> {
    const [row] = await this.#db('clusters')
      .insert({
        name: input.name,
        provider: input.provider,
        region: input.region,
        endpoint: input.endpoint.replace(/\/+$/, ''),
        sealed_credential: input.apiKey ? this.#keyring.encrypt(SEAL, input.apiKey) : null,
        hosted: input.hosted ?? false,
        status: 'active',
      })
      .onConflict('name')
      .merge(['provider', 'region', 'endpoint', 'sealed_credential', 'hosted', 'status'])
      .returning('*');
    return row as ClusterRow;
  }

  async byName(name: string): Promise<ClusterRow | undefined> {
    return this.#db('clusters').where({ name }).first();
  }

  /**
   * Reads the engine's workers and records each as an instance of the cheapest instance type with
   * the same GPU model and count; instances the engine no longer reports become unavailable.
   */
  async sync(clusterId: string): Promise<SyncResult> {
    const cluster: ClusterRow = await this.#db('clusters').where({ id: clusterId }).first();
    const workers = await this.client(cluster).workers();
    const types = await this.#db('instance_types').select('id', 'name', 'gpu_type', 'gpu_count', 'gpu_memory_gb', 'price_per_second');
    const result: SyncResult = { instances: [], unmatched: [], unavailable: [] };
    await this.#db.transaction(async (trx) => {
      for (const worker of workers) {
        const type = types
          .filter((t) => t.gpu_type.toLowerCase() === worker.gpuType.toLowerCase() && t.gpu_count === worker.gpuCount)
          .sort((a, b) => Math.abs(a.gpu_memory_gb - worker.gpuMemoryGb) - Math.abs(b.gpu_memory_gb - worker.gpuMemoryGb) || Number(a.price_per_second) - Number(b.price_per_second))[0];
        if (!type) {
          result.unmatched.push({ worker: worker.address, reason: `no instance type has ${worker.gpuCount} x ${worker.gpuType}` });
          continue;
        }
        await trx('instances')
          .insert({ cluster_id: clusterId, instance_type_id: type.id, engine_worker: worker.address, status: 'available' })
          .onConflict(['cluster_id', 'engine_worker'])
          .merge(['instance_type_id', 'status']);
        result.instances.push({ worker: worker.address, instanceType: type.name, gpus: worker.gpuCount });
      }
      const seen = workers.map((worker) => worker.address);
      const gone = await trx('instances')
        .where({ cluster_id: clusterId, status: 'available' })
        .whereNotIn('engine_worker', seen.length ? seen : [''])
        .update({ status: 'unavailable' })
        .returning('engine_worker');
      result.unavailable = gone.map((row: { engine_worker: string }) => row.engine_worker);
      await trx('clusters').where({ id: clusterId }).update({ last_synced_at: trx.fn.now() });
    });
    return result;
  }

  /** The engine client of a cluster, reused while its endpoint and credential stay the same. */
  client(cluster: Pick<ClusterRow, 'id' | 'endpoint' | 'sealed_credential'>): XinferenceClient {
    const cached = this.#clients.get(cluster.id);
    if (cached && cached.endpoint === cluster.endpoint && cached.sealed === cluster.sealed_credential) return cached.client;
    const apiKey = cluster.sealed_credential ? this.#keyring.decrypt(SEAL, cluster.sealed_credential) : undefined;
    const client = new XinferenceClient(cluster.endpoint, { apiKey });
    this.#clients.set(cluster.id, { endpoint: cluster.endpoint, sealed: cluster.sealed_credential, client });
    return client;
  }

  /** The `Authorization` header value for a cluster's engine, from its sealed credential. */
  authorizationHeader(sealedCredential: string | null): string | undefined {
    if (!sealedCredential) return undefined;
    let header = this.#headers.get(sealedCredential);
    if (!header) {
      header = `Bearer ${this.#keyring.decrypt(SEAL, sealedCredential)}`;
      this.#headers.set(sealedCredential, header);
    }
    return header;
  }

  async clientOf(clusterId: string): Promise<XinferenceClient> {
    const cluster = await this.#db('clusters').where({ id: clusterId }).first('id', 'endpoint', 'sealed_credential');
    if (!cluster) throw new Error(`cluster ${clusterId} does not exist`);
    return this.client(cluster);
  }
}
