import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { ADMIN_PERMISSIONS, SimulatedAuth, type SimulatorAuthOptions } from './simulator/auth.ts';
import {
  SimulatedCluster,
  type LaunchFailureKind,
  type LaunchRecord,
  type SimulatedGpu,
  type SimulatedWorker,
  type SimulatorLog,
  type TerminationRecord,
} from './simulator/cluster.ts';
import { inferenceRoutes } from './simulator/generation.ts';
import { readJsonObject, sendJson, sendText, SimulatorError } from './simulator/http.ts';
import type { EngineEvent } from './simulator/events.ts';
import { createRouter } from './simulator/routes.ts';

export type { LaunchFailureKind, LaunchRecord, SimulatedGpu, SimulatedWorker, SimulatorLog, TerminationRecord } from './simulator/cluster.ts';
export type { SimulatedUser, SimulatorAuthOptions } from './simulator/auth.ts';
export type { EngineEvent } from './simulator/events.ts';

/**
 * Local GPU cluster simulator: an honest stand-in for the supervisor of a Xinference 3.x cluster,
 * used by `make run` and the tests when no real GPU cluster is configured.
 *
 * It speaks the subset of Xinference's REST API the platform uses and follows Xinference 3.x
 * (v3.2.0+61, commit 7ecec16b6) where the platform depends on it; each rule names the Xinference
 * source file it mirrors:
 * - authentication on by default (`simulator/auth.ts`): an admin user signs in for expiring access
 *   tokens, API keys may only read and list models, invalid bearers get the client's address
 *   banned (10 in 300 s → 429 for 3600 s);
 * - a launch is READY on the instance before the model is loaded, and answers 503 with
 *   Retry-After until its replicas are routed; a DELETE while loading is 400, a cancel after the
 *   engine's `load()` is a no-op that orphans the model; GPUs are shared by default; a dead model
 *   is recovered through ERROR back to READY; GPU names are raw NVML strings; a launch of a model
 *   Xinference does not have fails (`simulator/cluster.ts`, `simulator/model-registry.ts`).
 * - the replica API of 3.2 (`POST`, `GET /v1/models/{uid}/replicas`, `DELETE …/replicas/{id}`):
 *   a scale-up answers once its replica is loaded, scale changes of a model run one at a time,
 *   requests go round robin over the ready replicas, and each replica may be given a concurrency
 *   limit beyond which requests queue (`simulator/cluster.ts`, `simulator/replica-config.ts`).
 * - each model's events (`GET /v1/models/{uid}/events`, `models:read`): launches, terminations,
 *   recreations after a crash and inference errors, as the supervisor's event collector keeps them
 *   (`simulator/events.ts`).
 * - the inference routes answer as Xinference's do where they differ from the hosted API: an image
 *   `url` is a path on the worker's disk (JPEG), Whisper answers `json` and `verbose_json` only,
 *   `logit_bias` is 501, `n` and `encoding_format` are dropped (`simulator/generation.ts`);
 *   tools, structured output and `/v1/completions` as Xinference with vLLM answers them
 *   (`simulator/text-generation.ts`, `simulator/structured.ts`).
 *
 * Nothing runs on a GPU. It is also the "engine directly" baseline of the proxy benchmark, so the
 * hot paths stay lean: plain `node:http`, no framework, no per-request logging.
 */

export interface ClusterSimulatorOptions {
  host?: string;
  /** 0 picks any free port. */
  port?: number;
  /**
   * Xinference's authentication, on by default as since 3.0 (extra users, API keys, a short token
   * lifetime for tests, the ban rule); `false` runs it off, as `XINFERENCE_AUTH_ADVANCED=0`.
   */
  auth?: false | SimulatorAuthOptions;
  /** The password of the admin user `admin` (every permission); generated when not given. */
  adminPassword?: string;
  /** An API key (`xf-…`) of the admin user, for inference; generated when not given. */
  apiKey?: string;
  workers?: SimulatedWorker[];
  /** How long a launch takes to become ready (and a dead model to be recovered). */
  modelLoadMs?: number;
  /** Delay between generated tokens (streamed, and in total for non-streaming answers). */
  tokenLatencyMs?: number;
  /** Length in tokens (= words) of a generated answer unless `max_tokens` cuts it short. */
  completionTokens?: number;
  /** Dimension of the simulated embedding vectors. */
  embeddingDimensions?: number;
  /** XINFERENCE_ALLOW_MULTI_REPLICA_PER_GPU: true (the default) shares GPUs; false gives "No available slot". */
  allowMultiReplicaPerGpu?: boolean;
  /** XINFERENCE_MODEL_ACTOR_AUTO_RECOVER_LIMIT: null (the default) recovers a dead model without limit. */
  autoRecoverLimit?: number | null;
  /** How long a DELETE takes (0 by default; a real one takes 5 to 36 s). */
  terminateMs?: number;
  /**
   * The Xinference version played (`GET /v1/cluster/version`, 3.2.0 by default): from 3.2 a
   * launch's `worker_ip` may be a full `host:port`, and `POST /v1/models/{uid}/replicas` exists.
   */
  version?: string;
  /** Requests each replica generates at once, the rest queued (no limit by default; see `ClusterSettings`). */
  replicaConcurrency?: number | null;
  /** Refuse launches of combinations Xinference does not have (on by default). */
  checkModels?: boolean;
  log?: SimulatorLog;
}

export interface SimulatorCredentials {
  adminUser: string;
  adminPassword: string;
  apiKey: string;
}

export interface ClusterSimulator {
  readonly url: string;
  /** The admin user and the API key, when authentication is on. */
  readonly credentials: SimulatorCredentials | undefined;
  /** Authentication controls (password resets, permissions, keys, ban counters), when it is on. */
  readonly auth: SimulatedAuth | undefined;
  stop(): Promise<void>;
  /** The next launch (of `modelUid`, or of any model) starts loading, then fails: a generic engine error or a CUDA out-of-memory error. */
  failNextLaunch(kind: LaunchFailureKind, modelUid?: string): void;
  /**
   * The model's process dies. A serving model is recovered (unless `recover: false`, or its
   * recover budget is spent): it comes back READY after a load time. False when no such model.
   */
  crash(modelUid: string, options?: { recover?: boolean; message?: string }): boolean;
  setModelLoadMs(ms: number): void;
  /** The model's events as `GET /v1/models/{uid}/events` answers them (`simulator/events.ts`). */
  engineEvents(modelUid: string): EngineEvent[];
  setTokenLatencyMs(ms: number): void;
  /** Requests each replica generates at once, the rest queued; null lifts the limit (and admits those waiting). */
  setReplicaConcurrency(limit: number | null): void;
  /** Every launch request that got as far as the launch itself (duplicates included), in order. */
  readonly launches: readonly LaunchRecord[];
  /** Every successful termination, in order. */
  readonly terminations: readonly TerminationRecord[];
  /** OpenAI requests whose client went away before the response finished. */
  readonly abortedRequests: number;
  /** Tokens generated so far, over all chat completions. */
  readonly generatedTokens: number;
  /** Requests per route, keyed `METHOD /route/{param}`. */
  readonly requests: Readonly<Record<string, number>>;
  /** Uids of the models that serve. */
  running(): string[];
  /** OpenAI requests currently being generated. */
  active(): number;
  gpus(): SimulatedGpu[];
  state(): Record<string, unknown>;
}

export async function startClusterSimulator(options: ClusterSimulatorOptions = {}): Promise<ClusterSimulator> {
  const host = options.host ?? '127.0.0.1';
  const log = options.log;
  const generation = {
    tokenLatencyMs: nonNegative(options.tokenLatencyMs ?? 20, 'tokenLatencyMs'),
    completionTokens: Math.max(1, Math.floor(options.completionTokens ?? 16)),
    embeddingDimensions: Math.max(1, Math.floor(options.embeddingDimensions ?? 384)),
  };
  const cluster = new SimulatedCluster(options.workers ?? [{ name: 'sim-worker-0', gpuName: 'NVIDIA A10G', gpuCount: 4, gpuMemoryGb: 24 }], {
    modelLoadMs: nonNegative(options.modelLoadMs ?? 1500, 'modelLoadMs'),
    allowMultiReplicaPerGpu: options.allowMultiReplicaPerGpu ?? true,
    autoRecoverLimit: options.autoRecoverLimit ?? null,
    terminateMs: nonNegative(options.terminateMs ?? 0, 'terminateMs'),
    version: options.version ?? '3.2.0',
    replicaConcurrency: concurrencyLimit(options.replicaConcurrency ?? null),
    checkModels: options.checkModels ?? true,
    log,
  });

  let credentials: SimulatorCredentials | undefined;
  let auth: SimulatedAuth | undefined;
  if (options.auth !== false) {
    credentials = {
      adminUser: 'admin',
      adminPassword: options.adminPassword ?? randomBytes(18).toString('base64url'),
      apiKey: options.apiKey ?? `xf-${randomBytes(36).toString('base64url').replace(/[^A-Za-z0-9]/g, 'x').slice(0, 48)}`,
    };
    const extra = options.auth ?? {};
    auth = new SimulatedAuth({
      ...extra,
      users: [{ username: credentials.adminUser, password: credentials.adminPassword, permissions: ADMIN_PERMISSIONS }, ...(extra.users ?? [])],
      apiKeys: [{ key: credentials.apiKey, owner: credentials.adminUser }, ...(extra.apiKeys ?? [])],
    });
  }

  const inference = inferenceRoutes(cluster, generation, auth && ((req, uid, type) => auth?.checkModelAccess(req, uid, type)));
  const startedAt = Date.now();
  let supervisorAddress = `${host}:0`;

  function state(): Record<string, unknown> {
    return {
      workers: cluster.workers.map((worker) => ({
        name: worker.name,
        address: worker.address,
        gpu_name: worker.gpuName,
        gpu_memory_gb: worker.memoryGb,
        gpus: worker.gpus.map((holders, index) => ({ index, held_by: [...holders] })),
      })),
      models: [...cluster.models.values(), ...cluster.orphans].map((model) => ({
        model_uid: model.uid,
        model_name: model.name,
        model_type: model.type,
        status: model.status,
        registered: model.registered,
        orphan: cluster.orphans.has(model),
        replicas: model.replicas.map((r) => ({
          replica_id: r.id,
          replica_model_uid: r.uid,
          worker: r.worker?.name ?? null,
          gpu_idx: r.gpuIdx,
          status: r.status,
          routed: r.routed,
          error_message: r.errorMessage,
          requests: r.requests,
          in_flight: r.serving.size,
          queued: r.queue.length,
        })),
      })),
      running: cluster.running(),
      launches: cluster.launches.map((l) => ({ model_uid: l.modelUid, body: l.body, wait_ready: l.waitReady, at: l.at.toISOString() })),
      terminations: cluster.terminations.map((t) => ({ model_uid: t.modelUid, at: t.at.toISOString() })),
      pending_failures: cluster.pendingFailures.map((f) => ({ kind: f.kind, model_uid: f.modelUid ?? null })),
      aborted_requests: inference.counters.abortedRequests,
      generated_tokens: inference.counters.generatedTokens,
      active_requests: inference.active(),
      requests: { ...router.requests },
      auth: auth ? { invalid_bearers: auth.invalidBearers, banned_addresses: auth.bannedAddresses() } : null,
      settings: {
        model_load_ms: cluster.settings.modelLoadMs,
        token_latency_ms: generation.tokenLatencyMs,
        completion_tokens: generation.completionTokens,
        embedding_dimensions: generation.embeddingDimensions,
        version: cluster.settings.version,
        replica_concurrency: cluster.settings.replicaConcurrency,
      },
    };
  }

  /** The simulator's own controls (not Xinference's), for tests and `make run`; admin only. */
  async function controls(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    if (req.method === 'GET' && path === '/_simulator/state') return sendJson(res, 200, state());
    if (req.method !== 'POST') return sendJson(res, 405, { detail: 'Method Not Allowed' });
    const body = await readJsonObject(req, res, true);
    if (!body) return;
    if (path.startsWith('/_simulator/crash/')) {
      const uid = decodeURIComponent(path.slice('/_simulator/crash/'.length));
      const recover = typeof body.recover === 'boolean' ? body.recover : undefined;
      return cluster.crash(uid, { recover }) ? sendJson(res, 200, { crashed: uid }) : sendJson(res, 404, { detail: `Model not found in the model list, uid: ${uid}` });
    }
    switch (path) {
      case '/_simulator/fail-next-launch':
        if (body.kind !== 'error' && body.kind !== 'oom') return sendJson(res, 400, { detail: 'kind must be "error" or "oom"' });
        cluster.failNextLaunch(body.kind, typeof body.model_uid === 'string' ? body.model_uid : undefined);
        return sendJson(res, 200, { pending_failures: cluster.pendingFailures.length });
      case '/_simulator/model-load-ms':
      case '/_simulator/token-latency-ms': {
        if (typeof body.ms !== 'number' || !(body.ms >= 0)) return sendJson(res, 400, { detail: 'ms must be a number >= 0' });
        if (path === '/_simulator/model-load-ms') cluster.settings.modelLoadMs = body.ms;
        else generation.tokenLatencyMs = body.ms;
        return sendJson(res, 200, { ms: body.ms });
      }
      case '/_simulator/replica-concurrency': {
        const limit = body.limit;
        if (limit !== null && !(typeof limit === 'number' && Number.isInteger(limit) && limit >= 1)) return sendJson(res, 400, { detail: 'limit must be an integer >= 1, or null' });
        cluster.setReplicaConcurrency(limit);
        return sendJson(res, 200, { limit });
      }
      default:
        return sendJson(res, 404, { detail: 'Not Found' });
    }
  }

  const router = createRouter({
    cluster,
    inference,
    auth,
    startedAt,
    supervisorAddress: () => supervisorAddress,
    embeddingDimensions: generation.embeddingDimensions,
    controls,
  });

  const sockets = new Set<Socket>();
  const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    router.route(req, res).catch((error: unknown) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      if (error instanceof SimulatorError) {
        sendJson(res, error.status, { detail: error.message }, error.headers);
        return;
      }
      sendText(res, 500, `Internal Server Error: ${error instanceof Error ? error.message : String(error)}`);
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  server.listen(options.port ?? 0, host);
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const urlHost = host.includes(':') ? `[${host}]` : host;
  supervisorAddress = `${host}:${port}`;
  const url = `http://${urlHost}:${port}`;
  log?.info(
    { url, auth: Boolean(auth), version: cluster.settings.version, workers: cluster.workers.map((w) => `${w.name} ${w.gpus.length}x ${w.gpuName}`) },
    'cluster simulator (local stand-in for a GPU cluster running Xinference) started',
  );

  let stopped: Promise<void> | undefined;
  return {
    url,
    credentials,
    auth,
    stop() {
      stopped ??= (async () => {
        cluster.stop();
        inference.stopAll();
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        for (const socket of sockets) socket.destroy();
        await closed;
      })();
      return stopped;
    },
    failNextLaunch: (kind, modelUid) => cluster.failNextLaunch(kind, modelUid),
    crash: (modelUid, crashOptions) => cluster.crash(modelUid, crashOptions),
    engineEvents: (modelUid) => cluster.events.of(modelUid),
    setModelLoadMs(ms: number) {
      cluster.settings.modelLoadMs = nonNegative(ms, 'modelLoadMs');
    },
    setTokenLatencyMs(ms: number) {
      generation.tokenLatencyMs = nonNegative(ms, 'tokenLatencyMs');
    },
    setReplicaConcurrency(limit: number | null) {
      cluster.setReplicaConcurrency(concurrencyLimit(limit));
    },
    launches: cluster.launches,
    terminations: cluster.terminations,
    get abortedRequests() {
      return inference.counters.abortedRequests;
    },
    get generatedTokens() {
      return inference.counters.generatedTokens;
    },
    requests: router.requests,
    running: () => cluster.running(),
    active: () => inference.active(),
    gpus: () => cluster.gpus(),
    state,
  };
}

function concurrencyLimit(limit: number | null): number | null {
  if (limit !== null && !(Number.isInteger(limit) && limit >= 1)) throw new Error('replicaConcurrency must be an integer >= 1, or null');
  return limit;
}

function nonNegative(value: number, name: string): number {
  if (!Number.isFinite(value) || value < 0) throw new Error(`${name} must be a number >= 0`);
  return value;
}
