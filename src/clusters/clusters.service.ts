import type { Knex } from 'knex';
import type { Logger } from 'pino';
import { EngineError, INFERENCE_MODEL_TYPES, XinferenceClient, type InferenceModelType, type ManagementCredentials } from '../adapters/xinference.ts';
import { isLoopbackHost } from '../config.ts';
import type { Keyring } from '../crypto.ts';
import { announceChange, CHANGE_CHANNELS } from '../db/change-listener.ts';
import type { ClusterRow } from '../db/models/clusters.ts';
import { addClusterGpuPrices } from '../metering/metering.repository.ts';
import {
  findClientColumns,
  findClusterByName,
  listInstanceTypes,
  markCredentialsInvalid,
  markMissingUnavailable,
  reactivateCluster,
  recordReplicaApi,
  recordSync,
  upsertCluster,
  upsertInstance,
  type ClientColumns,
} from './clusters.repository.ts';
import { gpuTypeOf } from './gpu-names.ts';

/** Seal purposes: the inference API key (what the relay sends), and the management user. */
const SEAL = 'cluster-credential';
const MANAGEMENT_SEAL = 'cluster-management-credential';

/**
 * How the platform authenticates to a cluster's engine. `advanced` is Xinference's own auth (on by
 * default since 3.0): management calls as an admin user, inference with an API key, which may only
 * read and list models. `none` is a cluster run with `XINFERENCE_AUTH_ADVANCED=0`, acceptable only
 * behind network isolation, and registered so on purpose.
 */
export type ClusterAuth = { mode: 'none' } | { mode: 'advanced'; username: string; password: string; apiKey: string };

export interface ClusterRegistration {
  name: string;
  provider: string;
  region: string;
  /** The serving-engine supervisor's base URL. */
  endpoint: string;
  auth: ClusterAuth;
  /** Allows plain `http://` to a host that is not loopback (credentials then cross the network in clear). */
  insecureHttp?: boolean;
  /** The platform's shared cluster for hosted models. */
  hosted?: boolean;
}

export interface SyncResult {
  engineVersion: string;
  /** Whether the engine has Xinference 3.2's replica API (`XinferenceClient.hasReplicaApi`). */
  replicaApi: boolean;
  instances: Array<{ worker: string; instanceType: string; gpus: number }>;
  unmatched: Array<{ worker: string; reason: string }>;
  unavailable: string[];
}

/** A registration the engine or the rules refuse; the message is for the operator. */
export class ClusterRegistrationError extends Error {}

/** A cluster whose credentials were just checked, with the model types its inference key may call. */
export type CheckedCluster = ClusterRow & { inferenceModelTypes: InferenceModelType[] };

/** Tells every process's relay a cluster's status (on commit, in a transaction). */
function announceClusterStatus(db: Knex | Knex.Transaction, cluster: Pick<ClusterRow, 'id' | 'status'>): Promise<void> {
  return announceChange(db, CHANGE_CHANNELS.cluster, `${cluster.id} ${cluster.status}`);
}

/**
 * The registry of GPU clusters: registering one (its credentials checked against the engine and
 * sealed with the server key), syncing its instances from the engine's inventory, and the engine
 * client of each. A credential the engine refuses stops the cluster's calls: the cluster is marked
 * `credentials_invalid` and the operator alerted, so the platform's address is never banned.
 * Whether the engine has the replica API (`replica_api`) is detected at registration, check and
 * sync, by probing the route (docs/engine.md, Replicas).
 */
export class ClustersService {
  readonly #db: Knex;
  readonly #keyring: Keyring;
  readonly #log: Logger;
  readonly #timeoutMs: number;
  readonly #loadTimeoutMs: number | undefined;
  readonly #clients = new Map<string, { key: string; client: XinferenceClient }>();
  readonly #headers = new Map<string, string>();

  /** `loadTimeoutSeconds`: how long a replica call may wait for a model to load (the client's default, 30 minutes, unless given). */
  constructor(deps: { db: Knex; keyring: Keyring; log: Logger; engineTimeoutSeconds?: number; loadTimeoutSeconds?: number }) {
    this.#db = deps.db;
    this.#keyring = deps.keyring;
    this.#log = deps.log;
    this.#timeoutMs = (deps.engineTimeoutSeconds ?? 60) * 1000;
    this.#loadTimeoutMs = deps.loadTimeoutSeconds === undefined ? undefined : deps.loadTimeoutSeconds * 1000;
  }

  /**
   * Adds a cluster, or updates the one of that name, once its engine accepted the credentials:
   * the admin user signs in and holds every scope the platform needs, and the API key may read and
   * list models. Plain http to a non-loopback host needs `insecureHttp`.
   */
  async register(input: ClusterRegistration): Promise<CheckedCluster> {
    const endpoint = checkedEndpoint(input.endpoint, input.insecureHttp ?? false);
    const { inferenceModelTypes, replicaApi } = await this.#verify(input.name, endpoint, input.auth);
    const { auth } = input;
    const cluster = await upsertCluster(this.#db, {
      name: input.name,
      provider: input.provider,
      region: input.region,
      endpoint,
      auth_mode: auth.mode,
      sealed_credential: auth.mode === 'advanced' ? this.#keyring.encrypt(SEAL, auth.apiKey) : null,
      sealed_management_credential:
        auth.mode === 'advanced' ? this.#keyring.encrypt(MANAGEMENT_SEAL, JSON.stringify({ username: auth.username, password: auth.password })) : null,
      hosted: input.hosted ?? false,
      replica_api: replicaApi,
    });
    await announceClusterStatus(this.#db, cluster);
    return Object.assign(cluster, { inferenceModelTypes });
  }

  /** Checks a registered cluster's stored credentials again; a cluster that passes is active again. */
  async check(name: string): Promise<CheckedCluster> {
    const cluster = await this.byName(name);
    if (!cluster) throw new ClusterRegistrationError(`no cluster is named ${name}`);
    const { inferenceModelTypes, replicaApi } = await this.#verify(name, cluster.endpoint, this.#authOf(cluster));
    const reactivated = await reactivateCluster(this.#db, cluster.id);
    if (reactivated) await announceClusterStatus(this.#db, reactivated);
    const recorded = await recordReplicaApi(this.#db, cluster.id, replicaApi);
    return Object.assign(recorded ?? reactivated ?? cluster, { inferenceModelTypes });
  }

  async byName(name: string): Promise<ClusterRow | undefined> {
    return findClusterByName(this.#db, name);
  }

  /**
   * Stops a cluster's calls after its engine refused a credential: marks it `credentials_invalid`
   * and alerts the operator (an error-level log line; `cluster list` shows the status and reason).
   * Also for the relay to call when the engine refuses the inference key. Every process's relay
   * hears of it on commit (CHANGE_CHANNELS.cluster), and stops sending the credential at once.
   */
  async markCredentialsInvalid(clusterId: string, reason: string): Promise<void> {
    const name = await this.#db.transaction(async (trx) => {
      const changed = await markCredentialsInvalid(trx, clusterId, reason.slice(0, 1000));
      if (changed !== undefined) await announceClusterStatus(trx, { id: clusterId, status: 'credentials_invalid' });
      return changed;
    });
    if (name !== undefined) {
      this.#log.error(
        { cluster: name, cluster_id: clusterId, reason, alert: 'cluster_credentials_invalid' },
        'the engine refused the cluster credentials: its calls are stopped until an operator runs `cluster register` or `cluster check`',
      );
    }
  }

  /**
   * Reads the engine's workers and records each as an instance of the instance type with the same
   * GPU type (from the raw NVML name) and count, the closest memory, then the lowest price;
   * instances the engine no longer reports become unavailable. Records the engine version, and
   * whether the engine has the replica API.
   */
  async sync(clusterId: string): Promise<SyncResult> {
    const client = await this.clientOf(clusterId);
    const engineVersion = await client.version();
    const replicaApi = await client.hasReplicaApi();
    const workers = await client.workers();
    const types = await listInstanceTypes(this.#db);
    const result: SyncResult = { engineVersion, replicaApi, instances: [], unmatched: [], unavailable: [] };
    await this.#db.transaction(async (trx) => {
      for (const worker of workers) {
        const gpuType = gpuTypeOf(worker.gpuName);
        if (!gpuType) {
          result.unmatched.push({ worker: worker.address, reason: `the GPU name "${worker.gpuName}" is not in the GPU name table (src/clusters/gpu-names.ts)` });
          continue;
        }
        const type = types
          .filter((t) => t.gpu_type.toLowerCase() === gpuType.toLowerCase() && t.gpu_count === worker.gpuCount)
          .sort((a, b) => Math.abs(a.gpu_memory_gb - worker.gpuMemoryGb) - Math.abs(b.gpu_memory_gb - worker.gpuMemoryGb) || Number(a.price_per_second) - Number(b.price_per_second))[0];
        if (!type) {
          result.unmatched.push({ worker: worker.address, reason: `no instance type has ${worker.gpuCount} x ${gpuType} ("${worker.gpuName}")` });
          continue;
        }
        await upsertInstance(trx, { cluster_id: clusterId, instance_type_id: type.id, engine_worker: worker.address });
        result.instances.push({ worker: worker.address, instanceType: type.name, gpus: worker.gpuCount });
      }
      result.unavailable = await markMissingUnavailable(trx, clusterId, workers.map((worker) => worker.address));
      // Each service the cluster now sells gets a price row (its list price unless an operator set one).
      await addClusterGpuPrices(trx, clusterId);
      await recordSync(trx, clusterId, { version: engineVersion, replicaApi });
    });
    return result;
  }

  /**
   * The engine client of a cluster, reused while its endpoint, credentials and version stay the
   * same. A cluster whose credentials were refused gets no client: its calls stay stopped.
   */
  client(cluster: ClientColumns): XinferenceClient {
    if (cluster.status === 'credentials_invalid') {
      throw new EngineError(
        'credentials',
        `the engine of cluster ${cluster.name} refused its credentials (${cluster.status_reason ?? 'no reason recorded'}); ` +
          'its calls are stopped until an operator runs `cluster register` or `cluster check`',
      );
    }
    const key = [cluster.endpoint, cluster.auth_mode, cluster.sealed_management_credential, cluster.engine_version].join('\n');
    const cached = this.#clients.get(cluster.id);
    // A latched rejection is kept unless an operator made the cluster active again.
    if (cached && cached.key === key && !cached.client.rejected) return cached.client;
    const auth = this.#authOf(cluster);
    const client = new XinferenceClient(cluster.endpoint, {
      management: auth.mode === 'advanced' ? { username: auth.username, password: auth.password } : undefined,
      timeoutMs: this.#timeoutMs,
      loadTimeoutMs: this.#loadTimeoutMs,
      engineVersion: cluster.engine_version,
      onCredentialsRejected: (reason) => this.markCredentialsInvalid(cluster.id, reason),
    });
    this.#clients.set(cluster.id, { key, client });
    return client;
  }

  /** The `Authorization` header value for inference calls to a cluster's engine, from its sealed API key. */
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
    const cluster = await findClientColumns(this.#db, clusterId);
    if (!cluster) throw new Error(`cluster ${clusterId} does not exist`);
    return this.client(cluster);
  }

  #authOf(cluster: Pick<ClusterRow, 'auth_mode' | 'sealed_credential' | 'sealed_management_credential'>): ClusterAuth {
    if (cluster.auth_mode === 'none') return { mode: 'none' };
    if (!cluster.sealed_management_credential || !cluster.sealed_credential) {
      throw new EngineError('credentials', 'the cluster has no management user: register it again with --admin-user and --admin-password-env');
    }
    const management = JSON.parse(this.#keyring.decrypt(MANAGEMENT_SEAL, cluster.sealed_management_credential)) as ManagementCredentials;
    return { mode: 'advanced', ...management, apiKey: this.#keyring.decrypt(SEAL, cluster.sealed_credential) };
  }

  /**
   * The engine runs in the auth mode given, and accepts the credentials with the scopes needed;
   * the model types the inference key may call (every one without authentication), and whether
   * the engine has the replica API.
   */
  async #verify(name: string, endpoint: string, auth: ClusterAuth): Promise<{ inferenceModelTypes: InferenceModelType[]; replicaApi: boolean }> {
    const client = new XinferenceClient(endpoint, {
      management: auth.mode === 'advanced' ? { username: auth.username, password: auth.password } : undefined,
      timeoutMs: this.#timeoutMs,
    });
    try {
      const authEnabled = await client.authEnabled();
      if (auth.mode === 'none' && authEnabled) {
        throw new ClusterRegistrationError(
          `${name}: the engine at ${endpoint} runs with authentication on; register it with --admin-user, --admin-password-env and --api-key-env`,
        );
      }
      if (auth.mode === 'advanced' && !authEnabled) {
        throw new ClusterRegistrationError(
          `${name}: the engine at ${endpoint} runs with authentication off (XINFERENCE_AUTH_ADVANCED=0); ` +
            'register it with --auth none, and only if its network is isolated',
        );
      }
      if (auth.mode === 'none') return { inferenceModelTypes: [...INFERENCE_MODEL_TYPES], replicaApi: await client.hasReplicaApi() };
      await client.checkManagementAccess();
      const inferenceModelTypes = await client.checkInferenceKey(auth.apiKey);
      return { inferenceModelTypes, replicaApi: await client.hasReplicaApi() };
    } catch (error) {
      if (error instanceof EngineError) throw new ClusterRegistrationError(`${name}: ${error.message}`);
      throw error;
    }
  }
}

/** The endpoint without a trailing slash; http only to a loopback host unless allowed explicitly. */
function checkedEndpoint(endpoint: string, insecureHttp: boolean): string {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    throw new ClusterRegistrationError(`the endpoint "${endpoint}" is not a URL`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new ClusterRegistrationError(`the endpoint must be an https URL, not ${url.protocol}`);
  if (url.username || url.password) throw new ClusterRegistrationError('the endpoint must not carry credentials; pass them with the credential flags');
  if (url.protocol === 'http:' && !isLoopbackHost(url.hostname) && !insecureHttp) {
    throw new ClusterRegistrationError(
      `the endpoint ${url.origin} is plain http to a host that is not loopback: the engine's credentials would cross the network in clear. ` +
        'Use https, or pass --insecure-http if the network between the platform and the cluster is private and trusted',
    );
  }
  return endpoint.replace(/\/+$/, '');
}
