import { randomBytes } from 'node:crypto';
import got, { type Got, type Method } from 'got';

/**
 * How a call to the engine went wrong: the engine refused the launch for lack of room
 * (`capacity`) or as invalid (`rejected`), did not answer usefully (`unavailable`, worth a retry),
 * refused the cluster's credentials (`credentials`: never retried, the cluster's calls stop), or
 * does not know the model a call names (`missing`: terminated, or never launched).
 */
export class EngineError extends Error {
  readonly kind: 'capacity' | 'rejected' | 'unavailable' | 'credentials' | 'missing';

  constructor(kind: EngineError['kind'], message: string) {
    super(message);
    this.name = 'EngineError';
    this.kind = kind;
  }
}

export interface LaunchSpec {
  modelUid: string;
  modelName: string;
  modelType: string;
  modelEngine: string;
  modelFormat: string;
  modelSizeInBillions: number;
  quantization: string;
  gpuCount: number;
  /** The worker to place the model on (`host:port` as the engine reports it). */
  workerAddress?: string;
}

/**
 * Where a model is on the engine: `loading` (launching, or READY but not answering yet), `ready`
 * (every replica READY and `GET /v1/models/{uid}` answers 200), `recovering` (the engine recreates a
 * model that died), `error` (a replica failed; `capacity` when GPU memory or slots ran out) or
 * `missing` (unknown to the engine). Xinference reports READY before the model is loaded, hence the
 * second check (docs/engine.md, Readiness and Recovery).
 */
export type ModelState =
  | { state: 'loading'; progress: number }
  | { state: 'ready' }
  | { state: 'recovering'; message: string }
  | { state: 'error'; message: string; capacity: boolean }
  | { state: 'missing' };

/**
 * Where a new replica goes (`replica_config` of Xinference 3.2: one device, `core/replica_config.py`).
 * Without one, the engine picks the least-loaded worker and GPUs itself.
 */
export interface ReplicaPlacement {
  /** The worker, `host:port` exactly as the engine reports it. */
  workerAddress: string;
  /** The GPU indexes on that worker; omitted, the worker picks `gpuCount` of them. */
  gpuIdx?: number[];
  /** How many GPUs (with `gpuIdx`, their count); omitted, the engine's "auto" (one). */
  gpuCount?: number;
}

/** A replica the engine added (`POST /v1/models/{uid}/replicas`): loaded and serving. */
export interface AddedReplica {
  replicaId: number;
  /** The engine's name of the replica, `<model uid>-rep<replica id>`. */
  replicaModelUid: string;
  workerAddress: string;
}

/** A replica as the engine reports it (`GET /v1/models/{uid}/replicas`). */
export interface EngineReplica {
  replicaId: number;
  replicaModelUid: string;
  workerAddress: string;
  /** CREATING (loading), READY, ERROR, TERMINATING or TERMINATED (`core/status_guard.py`, `LaunchStatus`). */
  status: string;
  errorMessage: string | null;
  /** The GPU indexes it runs on, once it serves (3.2: from its worker); null when not known. */
  gpuIdx: number[] | null;
}

/**
 * One of a model's events as the engine records them (`GET /v1/models/{uid}/events`; Xinference's
 * `core/event.py`, `EventCollectorActor`): its level, when (whole seconds: the engine keeps
 * `int(time.time())`) and its text. docs/engine.md, Events, says which events the engine records.
 */
export interface EngineEvent {
  level: 'info' | 'warning' | 'error';
  occurredAt: Date;
  message: string;
}

/** What a replica's DELETE did: `deleted` (the model is gone when none remain), `missing`, or `pending` (loading or recovering: ask again later). */
export type ReplicaDeletion = { state: 'deleted'; remainingReplicas: number } | { state: 'missing' } | { state: 'pending' };

/** A scale-up that stopped at a failure: the replicas added before it stay on the engine. */
export class ReplicaScaleError extends EngineError {
  readonly added: AddedReplica[];

  constructor(cause: EngineError, added: AddedReplica[]) {
    super(cause.kind, added.length ? `${cause.message} (after ${added.length} replica${added.length === 1 ? '' : 's'} added)` : cause.message);
    this.name = 'ReplicaScaleError';
    this.added = added;
  }
}

export interface EngineWorker {
  address: string;
  /** The GPU's raw NVML name ("NVIDIA A100-SXM4-80GB"). */
  gpuName: string;
  gpuCount: number;
  gpuMemoryGb: number;
}

/** The admin user the platform manages models as (Xinference's advanced auth, on by default since 3.0). */
export interface ManagementCredentials {
  username: string;
  password: string;
}

export interface XinferenceClientOptions {
  /** The admin user for management calls; undefined for a cluster run with authentication off. */
  management?: ManagementCredentials | undefined;
  /** Per request. A DELETE may take 5 to 36 s on Xinference (actor teardown, VRAM reclaim). */
  timeoutMs?: number;
  /**
   * Per replica call: Xinference answers a scale-up once the new replica has loaded, and a replica's
   * DELETE waits for a scale-up of the same model in progress (30 minutes unless given).
   */
  loadTimeoutMs?: number;
  /** The engine's version ("3.2.0"), when known: it decides how a worker is named in a launch. */
  engineVersion?: string | null | undefined;
  /**
   * Called once when the engine refuses the management credential (401 after a fresh login, 403
   * for a missing scope, or a refused login). The client then makes no further calls.
   */
  onCredentialsRejected?: (reason: string) => void | Promise<void>;
}

/** The scopes the platform's management calls need (Xinference's `api/routers/models.py`, `admin.py`). */
export const MANAGEMENT_SCOPES = ['models:list', 'models:read', 'models:write', 'admin'] as const;

interface EngineResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
  detail: string;
}

interface Session {
  accessToken: string;
  refreshToken: string;
  /** When to refresh: well before the token expires. */
  refreshAt: number;
}

const GIB = 1024 ** 3;
/** Xinference's default access-token lifetime (XINFERENCE_ACCESS_TOKEN_EXPIRE_MINUTES). */
const DEFAULT_TOKEN_LIFETIME_MS = 30 * 60_000;
const CAPACITY_MESSAGE = /out of memory|OutOfMemoryError|less than desired GPU memory utilization|No available slot|No available worker|No worker has capacity/i;
/** A model uid nothing on the engine can ever be: a uid may not end in `-rep<n>` (`core/utils.py`, `is_valid_model_uid`). */
const PROBE_UID = 'platform-capability-probe-rep0';
const DEFAULT_LOAD_TIMEOUT_MS = 30 * 60_000;
/** The engine's event levels (`core/event.py`, `EventType`: INFO, WARNING, ERROR, answered by name). */
const EVENT_LEVELS: Readonly<Record<string, EngineEvent['level']>> = { INFO: 'info', WARNING: 'warning', ERROR: 'error' };

/**
 * The serving engine of a GPU cluster: a Xinference 3.x supervisor's REST API over `got`, against a
 * real supervisor or the simulator. Management calls go as the admin user, the token refreshed
 * before it expires. A refused credential is never retried in a loop: each invalid bearer counts
 * toward Xinference's ban of the platform's address (10 in 5 minutes: an hour), so after one fresh
 * login is refused too, the client stops and reports it (docs/engine.md, Credentials). Launches are
 * asynchronous under an explicit model uid, so a retried launch is recognised; readiness is polled.
 */
export class XinferenceClient {
  readonly #http: Got;
  readonly #loadTimeoutMs: number;
  readonly #management: ManagementCredentials | undefined;
  readonly #engineVersion: string | null | undefined;
  readonly #onRejected: XinferenceClientOptions['onCredentialsRejected'];
  #session: Session | undefined;
  #signingIn: Promise<string> | undefined;
  #rejected: string | undefined;

  constructor(endpoint: string, options: XinferenceClientOptions = {}) {
    this.#http = got.extend({
      prefixUrl: endpoint.replace(/\/+$/, ''),
      timeout: { request: options.timeoutMs ?? 60_000 },
      retry: { limit: 0 },
      throwHttpErrors: false,
      responseType: 'text',
    });
    this.#loadTimeoutMs = options.loadTimeoutMs ?? DEFAULT_LOAD_TIMEOUT_MS;
    this.#management = options.management;
    this.#engineVersion = options.engineVersion;
    this.#onRejected = options.onCredentialsRejected;
  }

  /** Why the engine refused the management credential, once it has; the client makes no calls then. */
  get rejected(): string | undefined {
    return this.#rejected;
  }

  /** Starts loading a model under `modelUid`; one already launched under that uid counts as launched. */
  async launch(spec: LaunchSpec): Promise<'launched' | 'already-launched'> {
    const response = await this.#managed('POST', 'v1/models', {
      searchParams: { wait_ready: 'false' },
      json: {
        model_uid: spec.modelUid,
        model_name: spec.modelName,
        model_type: spec.modelType,
        model_engine: spec.modelEngine,
        model_format: spec.modelFormat,
        model_size_in_billions: engineSize(spec.modelSizeInBillions),
        quantization: spec.quantization,
        n_gpu: spec.gpuCount,
        replica: 1,
        ...(spec.workerAddress ? { worker_ip: workerIpFor(spec.workerAddress, this.#engineVersion) } : {}),
      },
    });
    if (response.status === 200) return 'launched';
    if (response.status === 400 && /already in the model list/i.test(response.detail)) return 'already-launched';
    if (response.status === 503 || CAPACITY_MESSAGE.test(response.detail)) throw new EngineError('capacity', response.detail);
    if (response.status >= 500) throw new EngineError('unavailable', response.detail);
    throw new EngineError('rejected', response.detail);
  }

  /** Where a model is (see `ModelState`). */
  async state(modelUid: string): Promise<ModelState> {
    const instance = await this.#instance(modelUid);
    if (!instance) return { state: 'missing' };
    const replicas = instance.replica_statuses ?? [];
    const failed = replicas.find((replica) => replica.status === 'ERROR');
    if (instance.status === 'ERROR' && failed) {
      const message = failed.error_message || 'The engine could not load the model.';
      return { state: 'error', message, capacity: CAPACITY_MESSAGE.test(message) };
    }
    // A worker recreating a dead model reports its replica TERMINATING ("stopping") and the
    // instance TERMINATING, then ERROR, then READY again (auto-recovery).
    const recreating = replicas.some((replica) => replica.status === 'TERMINATING' || replica.status === 'READY');
    if (instance.status === 'TERMINATING' || (instance.status === 'ERROR' && recreating)) {
      return { state: 'recovering', message: `The engine reports the model ${instance.status} and is recreating it.` };
    }
    if (instance.status === 'ERROR') {
      // A launch that failed before its replicas were placed ("No available worker found") leaves no message.
      return { state: 'error', message: 'The engine reports the launch failed (ERROR) without a message.', capacity: false };
    }
    if (instance.status !== 'READY' || replicas.some((replica) => replica.status !== 'READY')) {
      return { state: 'loading', progress: await this.#progress(modelUid) };
    }
    const described = await this.#managed('GET', `v1/models/${encodeURIComponent(modelUid)}`);
    if (described.status === 200) return { state: 'ready' };
    if (described.status === 503) return { state: 'loading', progress: 1 };
    if (described.status === 400) return { state: 'error', message: described.detail, capacity: false };
    throw new EngineError('unavailable', described.detail);
  }

  /**
   * Stops a model, and says whether the engine confirms it is gone. `pending` while a launch is in
   * progress: Xinference answers a DELETE during a launch with 400, and a `/cancel` after the
   * worker's `load()` has returned is a no-op that still forgets the uid, leaving an engine that
   * holds its GPUs and can no longer be deleted. So a launch is waited out (READY or ERROR), then
   * deleted; the caller asks again later. `stopped` once the engine no longer knows the model.
   */
  async stop(modelUid: string): Promise<'stopped' | 'pending'> {
    const instance = await this.#instance(modelUid);
    if (!instance) return 'stopped';
    const replicas = instance.replica_statuses ?? [];
    const launching =
      instance.status === 'CREATING' ||
      instance.status === 'UPDATING' ||
      (instance.status === 'READY' && replicas.some((replica) => replica.status === 'CREATING' || replica.status === 'LOADING'));
    // A worker recreating a dead model (auto-recovery) holds its launch guard: waited out as a launch.
    const recovering = (instance.status === 'ERROR' || instance.status === 'TERMINATING') && replicas.some((replica) => replica.status === 'TERMINATING');
    if (launching || recovering) return 'pending';
    const response = await this.#managed('DELETE', `v1/models/${encodeURIComponent(modelUid)}`);
    // 400 naming `…-repN` (not routed yet), or "`<uid>-repN` is launching" (`core/worker.py`, `terminate_model`, during a recovery).
    if (response.status === 400 && /-rep\d+(\s+is launching)?\s*$/.test(response.detail)) return 'pending';
    if (response.status === 400 && /not found/i.test(response.detail)) return 'stopped';
    if (response.status !== 200) throw new EngineError('unavailable', response.detail);
    return (await this.#instance(modelUid)) ? 'pending' : 'stopped';
  }

  /**
   * Adds replicas to a running model, one after another (Xinference 3.2, `POST
   * /v1/models/{uid}/replicas`): `count` placed by the engine, or one per placement. The engine
   * answers each once its replica has loaded, so each call may take a model's load time
   * (`loadTimeoutMs`), and it runs the scale changes of a model one at a time. The replicas added, in
   * order; a failure throws a ReplicaScaleError holding those added before it. A call that timed out
   * may still complete on the engine: `listReplicas` tells.
   */
  async addReplicas(modelUid: string, replicas: number | ReplicaPlacement[]): Promise<AddedReplica[]> {
    const placements = typeof replicas === 'number' ? Array.from({ length: replicas }, () => undefined) : replicas;
    const added: AddedReplica[] = [];
    for (const placement of placements) {
      try {
        added.push(await this.#addReplica(modelUid, placement));
      } catch (error) {
        if (error instanceof EngineError) throw new ReplicaScaleError(error, added);
        throw error;
      }
    }
    return added;
  }

  async #addReplica(modelUid: string, placement: ReplicaPlacement | undefined): Promise<AddedReplica> {
    const device = placement && { worker_ip: placement.workerAddress, n_gpu: placement.gpuCount ?? 'auto', ...(placement.gpuIdx ? { gpu_idx: placement.gpuIdx } : {}) };
    const response = await this.#managed('POST', `v1/models/${encodeURIComponent(modelUid)}/replicas`, {
      json: device ? { replica_config: { devices: [device] } } : {},
      timeoutMs: this.#loadTimeoutMs,
    });
    const { status, detail } = response;
    if (status === 200) {
      const body = response.body as { replica_id: number; replica_model_uid: string; worker_address: string };
      return { replicaId: body.replica_id, replicaModelUid: body.replica_model_uid, workerAddress: body.worker_address };
    }
    // api/restful_api.py, add_model_replica: a ValueError is 400, a RuntimeError 503, anything else 500.
    if (status === 404 || status === 405) throw new EngineError('rejected', `the engine has no replica API (${status}: ${detail}); Xinference added it in 3.2`);
    if (status === 400 && /^(Model not found in the model list|Model has no active replicas)/.test(detail)) throw new EngineError('missing', detail);
    // The model's first replica is not routed yet (the launch is still loading): worth a retry once it serves.
    if (status === 400 && /^Cannot find worker for existing replica/.test(detail)) throw new EngineError('unavailable', detail);
    if (CAPACITY_MESSAGE.test(detail)) throw new EngineError('capacity', detail);
    if (status >= 500) throw new EngineError('unavailable', detail);
    throw new EngineError('rejected', detail);
  }

  /**
   * A model's replicas as the engine reports them (`GET /v1/models/{uid}/replicas`, since 3.0): a
   * model it does not know has none, and a terminated one keeps its replicas, TERMINATED, until
   * the uid is launched again.
   */
  async listReplicas(modelUid: string): Promise<EngineReplica[]> {
    const response = await this.#managed('GET', `v1/models/${encodeURIComponent(modelUid)}/replicas`);
    if (response.status !== 200) throw new EngineError('unavailable', `GET /v1/models/{uid}/replicas answered ${response.status}: ${response.detail}`);
    return (response.body as ReplicaStatus[]).map((replica) => ({
      replicaId: replica.replica_id,
      replicaModelUid: replica.replica_model_uid,
      workerAddress: replica.worker_address,
      status: replica.status,
      errorMessage: replica.error_message ?? null,
      gpuIdx: replica.accelerators ? replica.accelerators.map(Number) : (replica.gpu_idx ?? null),
    }));
  }

  /**
   * A model's events, oldest first (`GET /v1/models/{uid}/events`, scope `models:read`; Xinference's
   * `api/routers/models.py`, `get_model_events`): the last 100 the engine kept under the uid, kept
   * after the model is terminated. A uid the engine has no event of answers none (the engine answers
   * `[]`; a 404, from an engine without the route, counts as none too). Entries that are not
   * `{event_type, event_ts, event_content}` with a known level are left out.
   */
  async events(modelUid: string): Promise<EngineEvent[]> {
    const response = await this.#managed('GET', `v1/models/${encodeURIComponent(modelUid)}/events`);
    if (response.status === 404) return [];
    if (response.status !== 200 || !Array.isArray(response.body)) {
      throw new EngineError('unavailable', `GET /v1/models/{uid}/events answered ${response.status}: ${response.detail}`);
    }
    return (response.body as unknown[]).flatMap((entry) => {
      const { event_type: type, event_ts: ts, event_content: content } = (entry ?? {}) as Record<string, unknown>;
      const level = typeof type === 'string' && Object.hasOwn(EVENT_LEVELS, type) ? EVENT_LEVELS[type] : undefined;
      if (!level || typeof ts !== 'number' || !Number.isFinite(ts) || typeof content !== 'string') return [];
      return [{ level, occurredAt: new Date(ts * 1000), message: content }];
    });
  }

  /**
   * Deletes one replica (`DELETE /v1/models/{uid}/replicas/{id}`, since 3.0). The engine tears it
   * down while it still takes its turn of the requests (those fail), then drops it; deleting the
   * last replica terminates the model. `pending` while the replica is still loading or being
   * recovered after a crash (the engine answers 400, as for a model's DELETE): ask again later.
   */
  async deleteReplica(modelUid: string, replicaId: number): Promise<ReplicaDeletion> {
    const response = await this.#managed('DELETE', `v1/models/${encodeURIComponent(modelUid)}/replicas/${replicaId}`, { timeoutMs: this.#loadTimeoutMs });
    const { status, detail } = response;
    if (status === 200) return { state: 'deleted', remainingReplicas: Number((response.body as { remaining_replicas?: unknown }).remaining_replicas) };
    // "… uid: <uid>-rep<n>" (not routed yet) or "<uid>-rep<n> is launching" (core/worker.py, terminate_model).
    if (status === 400 && /-rep\d+(\s+is launching)?\s*$/.test(detail)) return { state: 'pending' };
    if (status === 400 && /not found/i.test(detail)) return { state: 'missing' };
    throw new EngineError('unavailable', `DELETE /v1/models/{uid}/replicas/{id} answered ${status}: ${detail}`);
  }

  /**
   * Whether the engine has Xinference 3.2's replica API: its scale-up route (listing and deleting
   * replicas are older). Probed rather than read from the version, since the route decides and a
   * version string does not always tell (development builds between releases, forks, backports).
   * The probe's `replica_config` is not an object, which the route refuses (400) before it looks for
   * the model, so it changes and logs nothing on the engine; without the route, FastAPI answers 405
   * (the path exists for GET) or 404. It needs `models:write`, which management holds anyway.
   */
  async hasReplicaApi(): Promise<boolean> {
    const response = await this.#managed('POST', `v1/models/${PROBE_UID}/replicas`, { json: { replica_config: 'probe' } });
    if (response.status === 404 || response.status === 405) return false;
    if (response.status >= 500) throw new EngineError('unavailable', `POST /v1/models/{uid}/replicas answered ${response.status}: ${response.detail}`);
    return true;
  }

  /** The workers of the cluster with their GPUs, from the unauthenticated status route. */
  async workers(): Promise<EngineWorker[]> {
    const response = await this.#send('GET', 'status', {});
    if (response.status !== 200) throw new EngineError('unavailable', response.detail);
    const { workers } = response.body as { workers: Record<string, { status: Record<string, { name?: string; mem_total?: number }> }> };
    return Object.entries(workers).flatMap(([address, worker]) => {
      const gpus = Object.entries(worker.status)
        .filter(([key]) => key.startsWith('gpu-'))
        .map(([, gpu]) => gpu);
      const first = gpus[0];
      if (!first) return [];
      return [{ address, gpuName: (first.name ?? 'unknown').trim(), gpuCount: gpus.length, gpuMemoryGb: Math.round((first.mem_total ?? 0) / GIB) }];
    });
  }

  /** The engine's version (`GET /v1/cluster/version`, an admin route: it also proves the credential). */
  async version(): Promise<string> {
    const response = await this.#managed('GET', 'v1/cluster/version');
    if (response.status !== 200) throw new EngineError('unavailable', response.detail);
    return String((response.body as { version?: unknown }).version ?? 'unknown');
  }

  /** Whether the engine runs with authentication (`GET /v1/cluster/auth`, unauthenticated). */
  async authEnabled(): Promise<boolean> {
    const response = await this.#send('GET', 'v1/cluster/auth', {});
    if (response.status !== 200) throw new EngineError('unavailable', `GET /v1/cluster/auth answered ${response.status}: ${response.detail}`);
    return (response.body as { auth?: unknown }).auth === true;
  }

  /**
   * Checks the management user: it can sign in, and holds every scope the platform's calls need.
   * Each scope is probed with a harmless call (an unknown model uid); a 403 names the scope missing.
   * Throws EngineError(`credentials`) with a message for the operator; never reports a rejection.
   */
  async checkManagementAccess(): Promise<void> {
    if (!this.#management) throw new EngineError('credentials', 'no management user was given');
    const token = await this.#login(false);
    const probe = `platform-scope-check-${randomBytes(4).toString('hex')}`;
    const probes: Array<[scope: string, method: Method, path: string]> = [
      ['models:list', 'GET', 'v1/models/instances'],
      ['models:read', 'GET', `v1/models/${probe}/progress`],
      ['models:write', 'DELETE', `v1/models/${probe}`],
      ['admin', 'GET', 'v1/cluster/version'],
    ];
    const missing: string[] = [];
    for (const [scope, method, path] of probes) {
      const response = await this.#send(method, path, { headers: { authorization: `Bearer ${token}` } });
      if (response.status === 401) throw new EngineError('credentials', `the engine refused the access token of ${this.#management.username}: ${response.detail}`);
      if (response.status === 403) missing.push(scope);
      else if (response.status === 429) throw new EngineError('credentials', `the engine refuses this address for now (429: ${response.detail})`);
    }
    if (missing.length) {
      throw new EngineError(
        'credentials',
        `the management user ${this.#management.username} lacks the scope${missing.length > 1 ? 's' : ''} ${missing.join(', ')} ` +
          `(Xinference answered 403); give it the admin permission, or at least ${MANAGEMENT_SCOPES.join(', ')}`,
      );
    }
  }

  /**
   * Checks the inference API key: the engine accepts it for `models:list` and `models:read` (what
   * the relay's routes need), and answers which model types it may call (an API key may be limited
   * to some model uids or types: `api/oauth2/advanced/cache.py`, `has_model_access`). An access
   * token is refused here: it expires within the hour. A key that may call no model type is refused.
   */
  async checkInferenceKey(apiKey: string): Promise<InferenceModelType[]> {
    if (/^eyJ[\w-]*\.[\w-]+\.[\w-]+$/.test(apiKey)) {
      throw new EngineError('credentials', 'the inference credential is an access token (a JWT), which expires; create an API key in Xinference (xf-…) instead');
    }
    const headers = { authorization: `Bearer ${apiKey}` };
    const listed = await this.#send('GET', 'v1/models', { headers });
    if (listed.status === 401) throw new EngineError('credentials', `the engine refused the API key (401: ${listed.detail})`);
    if (listed.status === 403) throw new EngineError('credentials', `the API key lacks the scope models:list (403: ${listed.detail})`);
    if (listed.status === 429) throw new EngineError('credentials', `the engine refuses this address for now (429: ${listed.detail})`);
    if (listed.status !== 200) throw new EngineError('unavailable', `GET /v1/models answered ${listed.status}: ${listed.detail}`);
    const probe = `platform-scope-check-${randomBytes(4).toString('hex')}`;
    const read = await this.#send('GET', `v1/models/${probe}/progress`, { headers });
    if (read.status === 403) throw new EngineError('credentials', `the API key lacks the scope models:read (403: ${read.detail})`);
    // Each inference route checks the key's model permissions before it looks the model up
    // (`api/restful_api.py`, `_check_model_access`), so an unknown uid tells a refused type (403)
    // from an allowed one (400 or 404: the model is not found), without counting toward any ban.
    const allowed: InferenceModelType[] = [];
    for (const [type, path, request] of modelAccessProbes(probe)) {
      const answer = await this.#send('POST', path, { headers, ...request });
      if (answer.status === 429) throw new EngineError('credentials', `the engine refuses this address for now (429: ${answer.detail})`);
      if (answer.status === 401) throw new EngineError('credentials', `the engine refused the API key (401: ${answer.detail})`);
      if (answer.status !== 403) allowed.push(type);
    }
    if (!allowed.length) {
      throw new EngineError(
        'credentials',
        `the API key may call no model the platform launches (Xinference answered 403 "API key does not have access to model" on every inference route); ` +
          'give it access to all models, or to the model types the cluster will serve',
      );
    }
    return allowed;
  }

  async #instance(modelUid: string): Promise<InstanceInfo | undefined> {
    const response = await this.#managed('GET', 'v1/models/instances', { searchParams: { model_uid: modelUid } });
    if (response.status !== 200) throw new EngineError('unavailable', response.detail);
    return (response.body as InstanceInfo[])[0];
  }

  async #progress(modelUid: string): Promise<number> {
    const response = await this.#managed('GET', `v1/models/${encodeURIComponent(modelUid)}/progress`);
    return response.status === 200 ? Number((response.body as { progress?: number }).progress ?? 0) : 0;
  }

  /** A management call as the admin user (or without credentials on a cluster with auth off). */
  async #managed(method: Method, path: string, options: { searchParams?: Record<string, string>; json?: unknown; timeoutMs?: number } = {}): Promise<EngineResponse> {
    if (this.#rejected) throw new EngineError('credentials', this.#rejected);
    if (!this.#management) {
      const response = await this.#send(method, path, options);
      if (response.status === 401 || response.status === 403) {
        return this.#reject(`the engine requires credentials (${response.status}: ${response.detail}), but the cluster is registered with --auth none`);
      }
      return this.#checkBan(response);
    }
    let token = await this.#token();
    let response = await this.#send(method, path, { ...options, headers: { authorization: `Bearer ${token}` } });
    if (response.status === 401) {
      // The token was revoked (a password reset, a new server secret): sign in again, once.
      if (this.#session?.accessToken === token) this.#session = undefined;
      token = await this.#token();
      response = await this.#send(method, path, { ...options, headers: { authorization: `Bearer ${token}` } });
      if (response.status === 401) return this.#reject(`the engine refused a fresh access token of ${this.#management.username} (401: ${response.detail})`);
    }
    if (response.status === 403) {
      return this.#reject(`the engine refused ${method} /${path} to ${this.#management.username} (403: ${response.detail}); it needs the scopes ${MANAGEMENT_SCOPES.join(', ')}`);
    }
    return this.#checkBan(response);
  }

  #checkBan(response: EngineResponse): EngineResponse {
    if (response.status === 429) throw new EngineError('unavailable', `the engine refuses this address for now (429: ${response.detail})`);
    return response;
  }

  /** A current access token: the one held, refreshed before it expires, or a new sign-in. */
  async #token(): Promise<string> {
    if (this.#rejected) throw new EngineError('credentials', this.#rejected);
    if (this.#session && Date.now() < this.#session.refreshAt) return this.#session.accessToken;
    this.#signingIn ??= this.#renew().finally(() => {
      this.#signingIn = undefined;
    });
    return this.#signingIn;
  }

  async #renew(): Promise<string> {
    const refreshToken = this.#session?.refreshToken;
    this.#session = undefined;
    if (refreshToken) {
      const response = await this.#send('POST', 'v1/auth/refresh', { json: { refresh_token: refreshToken } });
      if (response.status === 200) return this.#hold(response.body);
      if (response.status >= 500) throw new EngineError('unavailable', `POST /v1/auth/refresh answered ${response.status}: ${response.detail}`);
      // An expired or revoked refresh token: sign in again.
    }
    return this.#login(true);
  }

  async #login(reportRejection: boolean): Promise<string> {
    const management = this.#management as ManagementCredentials;
    const response = await this.#send('POST', 'token', { json: { username: management.username, password: management.password } });
    if (response.status === 200) {
      if ((response.body as { must_change_password?: unknown }).must_change_password === true) {
        const reason = `the engine requires ${management.username} to change its password before it may be used`;
        if (reportRejection) return this.#reject(reason);
        throw new EngineError('credentials', reason);
      }
      return this.#hold(response.body);
    }
    if (response.status === 401 || response.status === 403) {
      const reason = `the engine refused the username or password of ${management.username} (${response.status}: ${response.detail})`;
      if (reportRejection) return this.#reject(reason);
      throw new EngineError('credentials', reason);
    }
    throw new EngineError('unavailable', `POST /token answered ${response.status}: ${response.detail}`);
  }

  #hold(body: unknown): string {
    const { access_token: accessToken, refresh_token: refreshToken } = body as { access_token?: unknown; refresh_token?: unknown };
    if (typeof accessToken !== 'string' || typeof refreshToken !== 'string') throw new EngineError('unavailable', 'the engine answered a sign-in without tokens');
    const now = Date.now();
    const expiresAt = tokenExpiry(accessToken) ?? now + DEFAULT_TOKEN_LIFETIME_MS;
    const lifetime = Math.max(0, expiresAt - now);
    // Refresh once three quarters of the lifetime have passed, and at most 5 minutes before expiry.
    this.#session = { accessToken, refreshToken, refreshAt: expiresAt - Math.min(5 * 60_000, lifetime / 4) };
    return accessToken;
  }

  async #reject(reason: string): Promise<never> {
    if (!this.#rejected) {
      this.#rejected = reason;
      this.#session = undefined;
      try {
        await this.#onRejected?.(reason);
      } catch {
        // Reporting is best effort; the caller still learns of the rejection below.
      }
    }
    throw new EngineError('credentials', reason);
  }

  async #send(
    method: Method,
    path: string,
    options: { searchParams?: Record<string, string>; json?: unknown; form?: FormData; headers?: Record<string, string>; timeoutMs?: number },
  ): Promise<EngineResponse> {
    let response;
    try {
      response = await this.#http(path, {
        method,
        searchParams: options.searchParams,
        json: options.json,
        body: options.form,
        headers: options.headers,
        ...(options.timeoutMs ? { timeout: { request: options.timeoutMs } } : {}),
      });
    } catch (error) {
      throw new EngineError('unavailable', `The engine did not answer ${method} /${path}: ${error instanceof Error ? error.message : String(error)}`);
    }
    const text = response.body;
    let body: unknown = text;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      // Xinference answers an unhandled error as plain text ("Internal Server Error: …").
    }
    return { status: response.statusCode, headers: response.headers, body, detail: detailOf(response.statusCode, body) };
  }
}

/** Xinference's model types, as its inference routes check a key's `model_type` permission. */
export const INFERENCE_MODEL_TYPES = ['LLM', 'embedding', 'rerank', 'image', 'audio'] as const;
export type InferenceModelType = (typeof INFERENCE_MODEL_TYPES)[number];

/** A valid request of each type's route for the model `uid` (`api/restful_api.py`: the model check comes after the body's parsing). */
function modelAccessProbes(uid: string): Array<[InferenceModelType, string, { json?: unknown; form?: FormData }]> {
  const form = new FormData();
  form.set('model', uid);
  form.set('file', new Blob([new Uint8Array(16)], { type: 'audio/wav' }), 'probe.wav');
  return [
    ['LLM', 'v1/chat/completions', { json: { model: uid, messages: [{ role: 'user', content: 'probe' }] } }],
    ['embedding', 'v1/embeddings', { json: { model: uid, input: 'probe' } }],
    ['rerank', 'v1/rerank', { json: { model: uid, query: 'probe', documents: ['probe'] } }],
    ['image', 'v1/images/generations', { json: { model: uid, prompt: 'probe' } }],
    ['audio', 'v1/audio/transcriptions', { form }],
  ];
}

interface InstanceInfo {
  status: string;
  replica_statuses?: Array<{ status: string; error_message?: string | null }>;
}

/** An entry of `GET /v1/models/{uid}/replicas` (`core/supervisor.py`, `get_replica_statuses`; the last four fields since 3.2). */
interface ReplicaStatus {
  replica_id: number;
  replica_model_uid: string;
  worker_address: string;
  status: string;
  error_message?: string | null;
  model_address?: string | null;
  accelerators?: string[] | null;
  replica_uid?: string | null;
  gpu_idx?: number[] | null;
}

/** Xinference writes fractional sizes with an underscore: 1.5 → "1_5". */
export function engineSize(sizeInBillions: number): number | string {
  return Number.isInteger(sizeInBillions) ? sizeInBillions : String(sizeInBillions).replace('.', '_');
}

/**
 * How a launch names its worker. From Xinference 3.2.0 a full `host:port` picks exactly that
 * worker; before, only the host was understood, and it stands for every worker on that host
 * (`core/supervisor.py`, `_resolve_worker_addresses`). A bracketed IPv6 address keeps its brackets
 * as a full address and loses them as a bare host, as Xinference's `_get_worker_host` does.
 */
export function workerIpFor(address: string, engineVersion: string | null | undefined): string {
  if (versionAtLeast(engineVersion, 3, 2)) return address;
  if (address.startsWith('[')) {
    const end = address.indexOf(']');
    if (end !== -1) return address.slice(1, end);
  }
  const colon = address.lastIndexOf(':');
  return colon !== -1 && /^\d+$/.test(address.slice(colon + 1)) ? address.slice(0, colon) : address;
}

/** Whether a version string ("3.2.0", "3.2.1.dev61+g7ecec16b6") is at least major.minor. */
export function versionAtLeast(version: string | null | undefined, major: number, minor: number): boolean {
  const match = /^v?(\d+)\.(\d+)/.exec(version ?? '');
  if (!match) return false;
  const [actualMajor, actualMinor] = [Number(match[1]), Number(match[2])];
  return actualMajor > major || (actualMajor === major && actualMinor >= minor);
}

/** The `exp` of a JWT, in milliseconds; undefined when the token is not a readable JWT. */
function tokenExpiry(token: string): number | undefined {
  const payload = token.split('.')[1];
  if (!payload) return undefined;
  try {
    const { exp } = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { exp?: unknown };
    return typeof exp === 'number' && Number.isFinite(exp) ? exp * 1000 : undefined;
  } catch {
    return undefined;
  }
}

function detailOf(status: number, body: unknown): string {
  if (body && typeof body === 'object' && 'detail' in body) {
    const detail = (body as { detail: unknown }).detail;
    return typeof detail === 'string' ? detail : JSON.stringify(detail);
  }
  return typeof body === 'string' && body ? body.slice(0, 2000) : `HTTP ${status}`;
}
