import { createHash, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { crc32, deflateSync } from 'node:zlib';
import type { Logger } from 'pino';

/**
 * Local GPU cluster simulator: an honest stand-in for the supervisor of an Xinference cluster,
 * used by `make run` and the tests when no real GPU cluster is configured.
 *
 * It speaks the subset of Xinference's REST API the platform uses, with the request and response
 * shapes, status codes and `{"detail": "..."}` error bodies of Xinference (xinference/api/restful_api.py,
 * xinference/core/supervisor.py, xinference/core/worker.py), plus the OpenAI-compatible inference
 * routes. Nothing runs on a GPU: GPUs are bookkeeping, model loads are timers, and every output is
 * derived deterministically from the request (a hash-seeded word list, hash-seeded unit vectors).
 *
 * Simulated cluster behaviour, chosen where Xinference is configurable:
 * - GPUs are exclusive, as with `XINFERENCE_ALLOW_MULTI_REPLICA_PER_GPU=0`: a launch that needs more
 *   idle GPUs than any worker has fails with "No available slot found for the model".
 * - Replicas are placed on a worker with enough idle GPUs (fewest models first, then address).
 * - A crashed model is not auto-recovered (as after `XINFERENCE_MODEL_ACTOR_AUTO_RECOVER_LIMIT` is spent).
 *
 * It is also the "engine directly" baseline of the proxy benchmark, so the hot paths stay lean:
 * plain `node:http`, no framework, no per-request logging.
 */

export interface SimulatedWorker {
  name: string;
  gpuType: string;
  gpuCount: number;
  gpuMemoryGb: number;
  /** The worker address Xinference reports (`host:port`); defaults to `<name>:30001`. */
  address?: string;
}

export type LaunchFailureKind = 'error' | 'oom';

export type SimulatorLog = Pick<Logger, 'info' | 'warn'>;

export interface ClusterSimulatorOptions {
  host?: string;
  /** 0 picks any free port. */
  port?: number;
  /** When set, every route but the unauthenticated ones Xinference has (`/status`, `/v1/address`, `/v1/cluster/auth`) needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  workers?: SimulatedWorker[];
  /** How long a launch takes to become ready. */
  modelLoadMs?: number;
  /** Delay between generated tokens (streamed, and in total for non-streaming answers). */
  tokenLatencyMs?: number;
  /** Length in tokens (= words) of a generated answer unless `max_tokens` cuts it short. */
  completionTokens?: number;
  /** Dimension of the simulated embedding vectors. */
  embeddingDimensions?: number;
  log?: SimulatorLog;
}

export interface LaunchRecord {
  modelUid: string;
  body: Record<string, unknown>;
  waitReady: boolean;
  at: Date;
}

export interface TerminationRecord {
  modelUid: string;
  at: Date;
}

export interface SimulatedGpu {
  worker: string;
  address: string;
  gpuType: string;
  index: number;
  memoryGb: number;
  /** The replica model uid holding this GPU, or null when idle. */
  heldBy: string | null;
}

export interface ClusterSimulator {
  readonly url: string;
  stop(): Promise<void>;
  /** The next launch (of `modelUid`, or of any model) starts loading, then fails: a generic engine error or a CUDA out-of-memory error. */
  failNextLaunch(kind: LaunchFailureKind, modelUid?: string): void;
  /** The model's process dies: in-flight requests fail, the model disappears, its GPUs are freed. False when no such model is launched. */
  crash(modelUid: string, message?: string): boolean;
  setModelLoadMs(ms: number): void;
  setTokenLatencyMs(ms: number): void;
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
  /** Uids of the models that are ready. */
  running(): string[];
  /** OpenAI requests currently being generated. */
  active(): number;
  gpus(): SimulatedGpu[];
  state(): Record<string, unknown>;
}

const JSON_TYPE = 'application/json';
const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-store',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
};
/** sse-starlette (Xinference's SSE writer) ends lines with CRLF. */
const SSE_END = '\r\n\r\n';
const DONE_EVENT = `data: [DONE]${SSE_END}`;
const GIB = 1024 ** 3;
const REPLICA_SUFFIX_RE = /^.+-rep\d+$/;
const UNAUTHENTICATED_PATHS = new Set(['/status', '/v1/address', '/v1/cluster/auth']);

const WORDS = [
  'the', 'model', 'answers', 'with', 'simulated', 'words', 'drawn', 'from', 'a', 'seeded', 'list',
  'cluster', 'token', 'stream', 'quietly', 'returns', 'every', 'request', 'same', 'text', 'again',
  'gpu', 'memory', 'holds', 'weights', 'while', 'layers', 'compute', 'bright', 'answers', 'for',
  'you', 'and', 'them', 'under', 'clear', 'skies', 'river', 'stone', 'light', 'signal', 'north',
  'garden', 'paper', 'window', 'orbit', 'harbor', 'meadow', 'silver', 'copper', 'lantern', 'echo',
  'forest', 'summit', 'ember', 'tide', 'cedar', 'prism', 'falcon', 'canyon', 'willow', 'ridge', 'delta', 'nova',
];

type ModelStatus = 'CREATING' | 'READY' | 'ERROR';
type ReplicaStatus = 'CREATING' | 'LOADING' | 'READY' | 'ERROR';

interface WorkerState {
  name: string;
  address: string;
  gpuType: string;
  memoryGb: number;
  /** Replica model uid per GPU index, null when idle. */
  gpus: (string | null)[];
}

interface Replica {
  id: number;
  uid: string;
  /** Undefined only for a replica whose placement failed in a cluster without workers. */
  worker: WorkerState | undefined;
  gpuIdx: number[];
  /** The gpu_idx the launch pinned, reported in the replica status (null when auto-placed). */
  pinnedGpuIdx: number[] | null;
  status: ReplicaStatus;
  errorMessage: string | null;
  subpoolAddress: string;
}

interface Model {
  uid: string;
  name: string;
  type: string;
  engine: string | null;
  format: string | null;
  sizeInBillions: number | string | null;
  quantization: string | null;
  replicaCount: number;
  /** Whether the launch is still in the registry (launching or ready), as the supervisor's replica info. */
  live: boolean;
  status: ModelStatus;
  createdTs: number;
  startedAt: number;
  loadMs: number;
  replicas: Replica[];
  timer: NodeJS.Timeout | undefined;
  waiters: ((error: SimulatorError | undefined) => void)[];
  generations: Set<Generation>;
}

interface Generation {
  model: Model;
  res: ServerResponse;
  done: boolean;
  timer: NodeJS.Timeout | undefined;
  fail(message: string): void;
  stop(): void;
}

/** An error Xinference would answer with this HTTP status and `{"detail": message}`. */
class SimulatorError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

const valueError = (message: string) => new SimulatorError(400, message);
const runtimeError = (message: string) => new SimulatorError(503, message);

export async function startClusterSimulator(options: ClusterSimulatorOptions = {}): Promise<ClusterSimulator> {
  const host = options.host ?? '127.0.0.1';
  const log = options.log;
  const authHeader = options.apiKey ? `Bearer ${options.apiKey}` : undefined;
  const workerSpecs = options.workers ?? [{ name: 'sim-worker-0', gpuType: 'A10G', gpuCount: 4, gpuMemoryGb: 24 }];
  const workers: WorkerState[] = workerSpecs.map((spec) => ({
    name: spec.name,
    address: spec.address ?? `${spec.name}:30001`,
    gpuType: spec.gpuType,
    memoryGb: spec.gpuMemoryGb,
    gpus: Array.from({ length: spec.gpuCount }, () => null),
  }));
  let modelLoadMs = nonNegative(options.modelLoadMs ?? 1500, 'modelLoadMs');
  let tokenLatencyMs = nonNegative(options.tokenLatencyMs ?? 20, 'tokenLatencyMs');
  const completionTokens = Math.max(1, Math.floor(options.completionTokens ?? 16));
  const embeddingDimensions = Math.max(1, Math.floor(options.embeddingDimensions ?? 384));
  const startedAt = Date.now();

  const models = new Map<string, Model>();
  const launches: LaunchRecord[] = [];
  const terminations: TerminationRecord[] = [];
  const requests: Record<string, number> = {};
  const pendingFailures: { kind: LaunchFailureKind; modelUid: string | undefined }[] = [];
  const activeGenerations = new Set<Generation>();
  let abortedRequests = 0;
  let generatedTokens = 0;
  let subpoolPort = 40000;

  // ---------------------------------------------------------------- models and GPUs

  const liveUids = () => [...models.values()].filter((m) => m.live).map((m) => m.uid);

  function releaseGpus(model: Model): void {
    for (const replica of model.replicas) {
      const worker = replica.worker;
      if (worker) for (const index of replica.gpuIdx) if (worker.gpus[index] === replica.uid) worker.gpus[index] = null;
    }
  }

  function idleGpus(worker: WorkerState): number[] {
    const idle: number[] = [];
    worker.gpus.forEach((holder, index) => holder === null && idle.push(index));
    return idle;
  }

  function modelCount(worker: WorkerState): number {
    let count = 0;
    for (const model of models.values()) if (model.live) count += model.replicas.filter((r) => r.worker === worker).length;
    return count;
  }

  /** Places every replica and reserves its GPUs, or throws the error the worker would raise. */
  function place(model: Model, nGpu: unknown, candidates: WorkerState[], gpuIdx: number[] | null): void {
    if (candidates.length === 0) throw runtimeError('No available worker found');
    let perReplica: number;
    if (nGpu === null) perReplica = 0;
    else if (nGpu === undefined || nGpu === 'auto') perReplica = 1;
    else if (typeof nGpu === 'string') throw valueError('Currently `n_gpu` only supports `auto`.');
    else if (typeof nGpu === 'number' && Number.isInteger(nGpu)) perReplica = nGpu;
    else throw valueError('Currently `n_gpu` only supports `auto`.');
    const maxGpus = Math.max(...candidates.map((w) => w.gpus.length));
    if (gpuIdx === null && nGpu !== null && (perReplica <= 0 || perReplica > maxGpus)) {
      throw valueError(`The parameter \`n_gpu\` must be greater than 0 and not greater than the number of GPUs: ${maxGpus} on the machine.`);
    }
    if (gpuIdx !== null && gpuIdx.length % model.replicaCount !== 0) {
      throw valueError('gpu_idx length must be a multiple of replica when specifying GPUs.');
    }
    for (let id = 0; id < model.replicaCount; id++) {
      const uid = `${model.uid}-rep${id}`;
      let worker: WorkerState | undefined;
      let chosen: number[];
      let pinned: number[] | null = null;
      if (gpuIdx !== null) {
        const size = gpuIdx.length / model.replicaCount;
        pinned = gpuIdx.slice(id * size, (id + 1) * size);
        const wanted = pinned;
        const ordered = [...candidates].sort((a, b) => modelCount(a) - modelCount(b) || a.address.localeCompare(b.address));
        worker = ordered.find((w) => wanted.every((i) => w.gpus[i] === null)) ?? ordered[0];
        if (!worker) throw runtimeError('No available worker found');
        const target = worker;
        const visible = target.gpus.map((_, i) => i);
        if (!wanted.every((i) => Number.isInteger(i) && i >= 0 && i < target.gpus.length)) {
          throw valueError(
            `Worker ${target.address} cannot use the GPUs with these indexes: ${pyList(wanted)}. ` +
              `Worker ${target.address} can only see these GPUs: ${pyList(visible)}.`,
          );
        }
        const busy = wanted.find((i) => target.gpus[i] !== null);
        if (busy !== undefined) {
          throw runtimeError(
            `GPU index ${busy} has been occupied with models: ${pyList([target.gpus[busy]])}, and multi-replica-per-GPU is disabled.`,
          );
        }
        chosen = wanted;
      } else {
        const fitting = candidates
          .filter((w) => idleGpus(w).length >= perReplica)
          .sort((a, b) => modelCount(a) - modelCount(b) || a.address.localeCompare(b.address));
        worker = fitting[0];
        if (!worker) {
          if (perReplica > 0) throw runtimeError('No available slot found for the model');
          throw runtimeError('No available worker found');
        }
        chosen = idleGpus(worker).slice(0, perReplica);
      }
      for (const index of chosen) worker.gpus[index] = uid;
      model.replicas.push({
        id,
        uid,
        worker,
        gpuIdx: chosen,
        pinnedGpuIdx: pinned,
        status: 'CREATING',
        errorMessage: null,
        subpoolAddress: `${workerHost(worker.address)}:${subpoolPort++}`,
      });
    }
  }

  function settle(model: Model, error: SimulatorError | undefined): void {
    const waiters = model.waiters;
    model.waiters = [];
    for (const waiter of waiters) waiter(error);
  }

  function markReady(model: Model): void {
    model.timer = undefined;
    model.status = 'READY';
    for (const replica of model.replicas) replica.status = 'READY';
    log?.info({ model_uid: model.uid, gpus: model.replicas.map((r) => `${r.worker?.name}:${r.gpuIdx.join(',')}`) }, 'cluster simulator: model ready');
    settle(model, undefined);
  }

  /** A launch that fails after it started: GPUs are freed, the uid leaves the registry, the instance stays as ERROR. */
  function failLaunch(model: Model, error: SimulatorError): void {
    if (model.timer) clearTimeout(model.timer);
    model.timer = undefined;
    releaseGpus(model);
    model.live = false;
    model.status = 'ERROR';
    for (const replica of model.replicas) {
      replica.status = 'ERROR';
      replica.errorMessage = error.message;
    }
    log?.warn({ model_uid: model.uid, error: error.message }, 'cluster simulator: model launch failed');
    settle(model, error);
  }

  function removeModel(model: Model, message: string): void {
    if (model.timer) clearTimeout(model.timer);
    model.timer = undefined;
    releaseGpus(model);
    model.live = false;
    models.delete(model.uid);
    for (const generation of [...model.generations]) generation.fail(message);
  }

  function launchFailure(kind: LaunchFailureKind, model: Model): SimulatorError {
    if (kind === 'oom') {
      const total = model.replicas[0]?.worker?.memoryGb ?? 24;
      const free = Math.max(0.2, total * 0.05);
      return runtimeError(
        `CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of ${total.toFixed(2)} GiB of which ` +
          `${free.toFixed(2)} GiB is free. Including non-PyTorch memory, this process has ${(total - free).toFixed(2)} GiB memory in use. ` +
          'Of the allocated memory 20.81 GiB is allocated by PyTorch, and 112.00 MiB is reserved by PyTorch but unallocated. ' +
          'If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.',
      );
    }
    return runtimeError('Engine core initialization failed. See root cause above. Failed core proc(s): {}');
  }

  function startLoading(model: Model): void {
    const index = pendingFailures.findIndex((f) => f.modelUid === undefined || f.modelUid === model.uid);
    const failure = index >= 0 ? pendingFailures.splice(index, 1)[0] : undefined;
    if (failure) {
      const error = launchFailure(failure.kind, model);
      model.timer = setTimeout(() => failLaunch(model, error), Math.floor(model.loadMs * 0.75));
    } else {
      model.timer = setTimeout(() => markReady(model), model.loadMs);
    }
  }

  /** Progress of a launching model: the first half of the load time is the download stage (0 to 0.8), the second the load (0.8 to 1). */
  function loadStage(model: Model): { progress: number; stage: 'downloading' | 'loading' } {
    if (model.status === 'READY') return { progress: 1, stage: 'loading' };
    const fraction = model.loadMs <= 0 ? 1 : Math.min(1, (Date.now() - model.startedAt) / model.loadMs);
    return fraction < 0.5 ? { progress: fraction * 1.6, stage: 'downloading' } : { progress: 0.8 + (fraction - 0.5) * 0.4, stage: 'loading' };
  }

  function replicaView(model: Model, replica: Replica): { status: ReplicaStatus; modelState: string } {
    if (replica.status !== 'CREATING') return { status: replica.status, modelState: replica.status === 'READY' ? 'ready' : 'error' };
    return loadStage(model).stage === 'downloading' ? { status: 'CREATING', modelState: 'registering' } : { status: 'LOADING', modelState: 'loading' };
  }

  function abilities(type: string): string[] {
    switch (type) {
      case 'embedding':
        return ['embed'];
      case 'rerank':
        return ['rerank'];
      case 'image':
        return ['text2image'];
      case 'audio':
        return ['audio2text'];
      default:
        return ['generate', 'chat'];
    }
  }

  /** The model description a worker reports (`to_description()` of the model family, plus engine and replica count). */
  function describe(model: Model, replica: Replica): Record<string, unknown> {
    const base = {
      model_type: model.type,
      address: replica.subpoolAddress,
      accelerators: replica.gpuIdx.map(String),
      model_name: model.name,
      model_engine: model.engine,
      model_format: model.format,
      quantization: model.quantization,
      model_hub: 'huggingface',
    };
    switch (model.type) {
      case 'embedding':
        return { ...base, dimensions: embeddingDimensions, max_tokens: 512, language: ['en'], model_revision: null, replica: model.replicaCount };
      case 'rerank':
        return { ...base, type: 'normal', max_tokens: 512, language: ['en'], model_revision: null, replica: model.replicaCount };
      case 'image':
      case 'audio':
        return { ...base, model_family: model.name, model_ability: abilities(model.type), model_revision: null, replica: model.replicaCount };
      default:
        return {
          ...base,
          model_lang: ['en'],
          model_ability: abilities(model.type),
          model_description: `${model.name} (simulated by the local cluster simulator)`,
          model_size_in_billions: model.sizeInBillions,
          model_family: model.name,
          multimodal_projector: null,
          revision: null,
          context_length: 32768,
          strict_system_first: false,
          replica: model.replicaCount,
        };
    }
  }

  /** Models a worker lists: the ones past the download stage (their spec is registered) or ready. */
  function listed(model: Model): boolean {
    return model.live && (model.status === 'READY' || loadStage(model).stage === 'loading');
  }

  function instanceInfo(model: Model): Record<string, unknown> {
    return {
      model_name: model.name,
      model_uid: model.uid,
      model_version: null,
      model_ability: model.status === 'READY' ? abilities(model.type) : [],
      replica: model.replicaCount,
      status: model.status,
      instance_created_ts: model.createdTs,
      n_worker: 1,
      replica_statuses: model.replicas.map((replica) => {
        const view = replicaView(model, replica);
        return {
          replica_id: replica.id,
          replica_model_uid: replica.uid,
          worker_address: replica.worker?.address ?? '',
          status: view.status,
          model_state: view.modelState,
          created_ts: model.createdTs,
          error_message: replica.errorMessage,
          replica_uid: null,
          gpu_idx: replica.pinnedGpuIdx,
        };
      }),
    };
  }

  /** The model an inference request names, or the error Xinference answers (`require_model`). */
  function requireModel(uid: unknown): Model {
    const model = typeof uid === 'string' ? models.get(uid) : undefined;
    if (!model || !model.live) {
      throw new SimulatorError(404, `Model not found in the model list, uid: ${String(uid)}. Available model uids: ${pyList(liveUids())}`);
    }
    if (model.status !== 'READY') {
      throw new SimulatorError(503, `Model is loading, please retry later: Model ${model.uid} is launching, not yet ready for inference`);
    }
    return model;
  }

  function requireAbility(model: Model, type: string, what: string): void {
    if (model.type !== type) throw new SimulatorError(500, `Model ${model.name} is not for ${what}.`);
  }

  // ---------------------------------------------------------------- Xinference management routes

  async function launchModel(req: IncomingMessage, res: ServerResponse, query: URLSearchParams): Promise<void> {
    const waitReadyRaw = query.get('wait_ready');
    const waitReady = waitReadyRaw === null ? true : parseBool(waitReadyRaw);
    if (waitReady === undefined) {
      return sendJson(res, 422, {
        detail: [{ type: 'bool_parsing', loc: ['query', 'wait_ready'], msg: 'Input should be a valid boolean, unable to interpret input', input: waitReadyRaw }],
      });
    }
    const body = await readJsonObject(req, res);
    if (!body) return;
    const modelType = typeof body.model_type === 'string' ? body.model_type : 'LLM';
    const replicaCount = validateReplica('replica' in body ? body.replica : 1);
    const modelName = body.model_name;
    if (!modelName || typeof modelName !== 'string') throw valueError('Invalid input. Please specify the `model_name` field.');
    if (!body.model_engine && modelType === 'LLM') throw valueError('Invalid input. Please specify the `model_engine` field.');
    let gpuIdx: number[] | null = null;
    if (body.gpu_idx !== undefined && body.gpu_idx !== null) {
      gpuIdx = Array.isArray(body.gpu_idx) ? (body.gpu_idx as number[]) : [body.gpu_idx as number];
      if (gpuIdx.length > 0 && gpuIdx.length % replicaCount !== 0) {
        throw valueError('Invalid input. Allocated gpu must be a multiple of replica.');
      }
      if (gpuIdx.length === 0) gpuIdx = null;
    }
    if ('wait_ready' in body) {
      // Xinference reads wait_ready from the query string only; a body field is passed on as a
      // keyword argument next to the explicit one and the call fails.
      throw new SimulatorError(500, "launch_builtin_model() got multiple values for keyword argument 'wait_ready'");
    }
    let candidates = workers;
    if (body.worker_ip !== undefined && body.worker_ip !== null) candidates = resolveWorkers(body.worker_ip);
    if (typeof body.request_limits === 'number' && body.request_limits < 0) {
      throw valueError('The `request_limits` parameter must be greater or equal than 0.');
    }
    let uid = typeof body.model_uid === 'string' ? body.model_uid : null;
    if (uid === null) uid = models.get(modelName)?.live ? `${modelName}-${randomUUID().slice(0, 8)}` : modelName;
    if (!uid.trim() || uid.length > 100 || REPLICA_SUFFIX_RE.test(uid)) {
      throw valueError(
        "The model UID is invalid. Please specify the model UID by 0 < length <= 100, not ending with the reserved replica suffix '-rep<number>'.",
      );
    }
    launches.push({ modelUid: uid, body, waitReady, at: new Date() });
    if (models.get(uid)?.live) throw valueError(`Model is already in the model list, uid: ${uid}`);

    const model: Model = {
      uid,
      name: modelName,
      type: modelType,
      engine: typeof body.model_engine === 'string' ? body.model_engine : null,
      format: typeof body.model_format === 'string' ? body.model_format : null,
      sizeInBillions: typeof body.model_size_in_billions === 'number' || typeof body.model_size_in_billions === 'string' ? body.model_size_in_billions : null,
      quantization: typeof body.quantization === 'string' ? body.quantization : null,
      replicaCount,
      live: true,
      status: 'CREATING',
      createdTs: Math.floor(Date.now() / 1000),
      startedAt: Date.now(),
      loadMs: modelLoadMs,
      replicas: [],
      timer: undefined,
      waiters: [],
      generations: new Set(),
    };
    models.set(uid, model);
    log?.info({ model_uid: uid, model_name: modelName, model_type: modelType, wait_ready: waitReady }, 'cluster simulator: launching model');
    const done = waitReady ? new Promise<SimulatorError | undefined>((resolve) => model.waiters.push(resolve)) : undefined;
    try {
      place(model, 'n_gpu' in body ? body.n_gpu : 'auto', candidates, gpuIdx);
      startLoading(model);
    } catch (error) {
      // The replica being placed already has its CREATING status when the worker refuses it.
      const id = model.replicas.length;
      if (id < model.replicaCount) {
        model.replicas.push({ id, uid: `${uid}-rep${id}`, worker: candidates[0], gpuIdx: [], pinnedGpuIdx: null, status: 'CREATING', errorMessage: null, subpoolAddress: '' });
      }
      failLaunch(model, error instanceof SimulatorError ? error : new SimulatorError(500, String(error)));
    }
    if (done) {
      const error = await done;
      if (error) throw error;
    }
    sendJson(res, 200, { model_uid: uid });
  }

  function resolveWorkers(workerIp: unknown): WorkerState[] {
    const entries = (Array.isArray(workerIp) ? workerIp : [workerIp])
      .flatMap((item) => String(item).split(','))
      .map((entry) => entry.trim())
      .filter(Boolean);
    const resolved: WorkerState[] = [];
    for (const entry of entries) {
      const matches = workers.filter((w) => w.address === entry || workerHost(w.address) === entry);
      if (matches.length === 0) throw valueError(`Worker ip address ${entry} is not in the cluster.`);
      for (const match of matches) if (!resolved.includes(match)) resolved.push(match);
    }
    return resolved;
  }

  function terminateModel(res: ServerResponse, uid: string): void {
    const model = models.get(uid);
    if (!model || !model.live) throw valueError(`Model not found in the model list, uid: ${uid}`);
    if (model.status !== 'READY') {
      // The supervisor only routes to a replica once it is ready; terminating a launching model
      // finds no worker for its first replica (cancel the launch instead).
      throw valueError(`Model not found in the model list, uid: ${uid}-rep0`);
    }
    removeModel(model, `Remote server unixsocket:///${model.replicas[0]?.subpoolAddress ?? uid} closed`);
    terminations.push({ modelUid: uid, at: new Date() });
    log?.info({ model_uid: uid }, 'cluster simulator: model terminated');
    sendJson(res, 200, null);
  }

  function cancelLaunch(res: ServerResponse, uid: string): void {
    const model = models.get(uid);
    if (!model || !model.live) throw new SimulatorError(500, `Model ${uid} has not been launched yet`);
    if (model.status === 'CREATING') failLaunch(model, new SimulatorError(499, 'Launch cancelled'));
    sendJson(res, 200, null);
  }

  function progress(res: ServerResponse, uid: string): void {
    const model = models.get(uid);
    if (!model || !model.live) return sendJson(res, 200, { progress: 0.0, stage: 'pending', download_files: [], replicas: [] });
    const { progress: value, stage } = loadStage(model);
    sendJson(res, 200, {
      progress: value,
      stage,
      download_files: [],
      replicas: model.replicas.map((replica) => ({
        replica_id: replica.id,
        replica_model_uid: replica.uid,
        progress: value,
        stage,
        info: '',
        updated_at: Date.now() / 1000,
        download_files: [],
      })),
    });
  }

  function describeModel(res: ServerResponse, uid: string): void {
    const model = models.get(uid);
    if (!model || !model.live) throw valueError(`Model not found in the model list, uid: ${uid}`);
    const replica = model.replicas[0];
    if (model.status !== 'READY' || !replica) {
      throw new SimulatorError(503, `Model is loading, please retry later: Model ${uid} is launching, not yet ready for inference`);
    }
    sendJson(res, 200, describe(model, replica));
  }

  function listModels(res: ServerResponse): void {
    const data: Record<string, unknown>[] = [];
    for (const model of models.values()) {
      const replica = model.replicas[0];
      if (replica && listed(model)) data.push({ id: model.uid, object: 'model', created: 0, owned_by: 'xinference', ...describe(model, replica) });
    }
    sendJson(res, 200, { object: 'list', data });
  }

  function instances(res: ServerResponse, query: URLSearchParams): void {
    const uid = query.get('model_uid');
    const name = query.get('model_name');
    const infos: Record<string, unknown>[] = [];
    for (const model of [...models.values()].sort((a, b) => (a.uid < b.uid ? -1 : a.uid > b.uid ? 1 : 0))) {
      if (uid !== null ? model.uid === uid : name === null || model.name === name) infos.push(instanceInfo(model));
    }
    sendJson(res, 200, infos);
  }

  function gpuStatus(worker: WorkerState): Record<string, Record<string, unknown>> {
    const status: Record<string, Record<string, unknown>> = {
      cpu: { usage: 0.05, total: 32, memory_used: 8 * GIB, memory_available: 248 * GIB, memory_total: 256 * GIB },
    };
    worker.gpus.forEach((holder, index) => {
      const total = worker.memoryGb * GIB;
      const used = holder === null ? 0 : Math.round(total * 0.9);
      status[`gpu-${index}`] = {
        name: `NVIDIA ${worker.gpuType}`,
        mem_total: total,
        mem_free: total - used,
        mem_used: used,
        mem_usage: used / total,
        gpu_util: holder === null ? 0 : 0.35,
      };
    });
    return status;
  }

  function clusterInfo(res: ServerResponse, query: URLSearchParams): void {
    const detailed = parseBool(query.get('detailed') ?? 'false') === true;
    const supervisor: Record<string, unknown> = { node_type: 'Supervisor', ip_address: supervisorAddress, gpu_count: 0, gpu_vram_total: 0 };
    if (detailed) {
      Object.assign(supervisor, { gpu_vram_available: 0, gpu_utilization: null, cpu_available: 7.6, cpu_count: 8, mem_used: 2 * GIB, mem_available: 30 * GIB, mem_total: 32 * GIB });
    }
    const nodes: Record<string, unknown>[] = [supervisor];
    for (const worker of workers) {
      const gpus = Object.entries(gpuStatus(worker)).filter(([key]) => key !== 'cpu').map(([, value]) => value);
      const vramTotal = gpus.reduce((sum, gpu) => sum + (gpu.mem_total as number), 0);
      const info: Record<string, unknown> = {
        node_type: 'Worker',
        ip_address: worker.address,
        gpu_count: gpus.length,
        gpu_vram_total: vramTotal === 0 ? 0 : `${Math.floor(vramTotal / 1024 / 1024)}MiB`,
      };
      if (detailed) {
        Object.assign(info, {
          cpu_available: 32 * 0.95,
          cpu_count: 32,
          mem_used: 8 * GIB,
          mem_available: 248 * GIB,
          mem_total: 256 * GIB,
          gpu_vram_total: vramTotal,
          gpu_utilization: gpus.length ? gpus.reduce((sum, gpu) => sum + (gpu.gpu_util as number), 0) / gpus.length : null,
          gpu_vram_available: gpus.reduce((sum, gpu) => sum + (gpu.mem_free as number), 0),
        });
      }
      nodes.push(info);
    }
    sendJson(res, 200, nodes);
  }

  function workersInfo(res: ServerResponse): void {
    sendJson(
      res,
      200,
      workers.map((worker) => {
        const specs: Record<string, unknown> = {};
        for (const model of models.values()) {
          if (!listed(model)) continue;
          for (const replica of model.replicas) if (replica.worker === worker) specs[replica.uid] = describe(model, replica);
        }
        return { 'work-ip': worker.address, models: specs };
      }),
    );
  }

  function clusterStatus(res: ServerResponse): void {
    const statuses: Record<string, unknown> = {};
    for (const worker of workers) statuses[worker.address] = { update_time: Date.now() / 1000, failure_remaining_count: 5, status: gpuStatus(worker) };
    sendJson(res, 200, { uptime: Math.floor((Date.now() - startedAt) / 1000), workers: statuses });
  }

  // ---------------------------------------------------------------- OpenAI-compatible routes

  function track(model: Model, res: ServerResponse, onStop: () => void, onFail: (message: string) => void): Generation {
    const generation: Generation = {
      model,
      res,
      done: false,
      timer: undefined,
      stop() {
        if (generation.done) return;
        generation.done = true;
        if (generation.timer) clearTimeout(generation.timer);
        generation.timer = undefined;
        activeGenerations.delete(generation);
        model.generations.delete(generation);
        onStop();
      },
      fail(message: string) {
        if (generation.done) return;
        generation.stop();
        onFail(message);
      },
    };
    activeGenerations.add(generation);
    model.generations.add(generation);
    res.once('close', () => {
      if (!generation.done) {
        abortedRequests++;
        generation.stop();
      }
    });
    return generation;
  }

  async function chatCompletions(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJsonObject(req, res);
    if (!body) return;
    if (typeof body.model !== 'string') return pydanticError(res, 'CreateChatCompletion', 'model');
    const messages = Array.isArray(body.messages) ? (body.messages as unknown[]) : [];
    if (messages.length === 0) throw valueError('Invalid input. Please specify the prompt.');
    const model = requireModel(body.model);
    requireAbility(model, 'LLM', 'chat');

    let promptTokens = 0;
    let lastUser = '';
    for (const message of messages) {
      const text = messageText(message);
      promptTokens += countWords(text);
      if (isRecord(message) && message.role === 'user') lastUser = text;
    }
    const maxTokensRaw = typeof body.max_completion_tokens === 'number' ? body.max_completion_tokens : body.max_tokens;
    const maxTokens = typeof maxTokensRaw === 'number' && maxTokensRaw >= 0 ? Math.floor(maxTokensRaw) : undefined;
    // vLLM's ignore_eos generates exactly max_tokens.
    let count = body.ignore_eos === true && maxTokens !== undefined ? maxTokens : completionTokens;
    let finishReason = 'stop';
    if (maxTokens !== undefined && maxTokens < count) {
      count = maxTokens;
      finishReason = 'length';
    }
    const words = answerWords(`${lastUser}\u0000${typeof body.seed === 'number' ? body.seed : ''}`, count);
    const id = `chatcmpl-${randomUUID()}`;
    const created = Math.floor(Date.now() / 1000);
    const usage = { prompt_tokens: promptTokens, completion_tokens: count, total_tokens: promptTokens + count };
    const latency = tokenLatencyMs;

    if (body.stream !== true) {
      const answer = () =>
        sendJson(res, 200, {
          id,
          object: 'chat.completion',
          created,
          model: model.uid,
          choices: [{ index: 0, message: { role: 'assistant', content: words.join(' ') }, finish_reason: finishReason }],
          usage,
        });
      if (latency === 0 || count === 0) {
        generatedTokens += count;
        return answer();
      }
      const generation = track(
        model,
        res,
        () => undefined,
        (message) => sendJson(res, 500, { detail: message }),
      );
      generation.timer = setTimeout(() => {
        generatedTokens += count;
        generation.stop();
        answer();
      }, latency * count);
      return;
    }

    const includeUsage = isRecord(body.stream_options) && body.stream_options.include_usage === true;
    const head = `data: {"id":${JSON.stringify(id)},"model":${JSON.stringify(model.uid)},"object":"chat.completion.chunk","created":${created},"choices":`;
    res.writeHead(200, SSE_HEADERS);
    let index = 0;
    const onDrain = () => schedule();
    const generation = track(
      model,
      res,
      () => res.off('drain', onDrain),
      (message) => res.end(`data: ${JSON.stringify({ error: message })}${SSE_END}`),
    );
    const finish = () => {
      let tail = `${head}[{"index":0,"delta":{"content":""},"finish_reason":${JSON.stringify(finishReason)}}]}${SSE_END}`;
      if (includeUsage) tail += `${head}[],"usage":${JSON.stringify(usage)}}${SSE_END}`;
      generation.stop();
      res.end(tail + DONE_EVENT);
    };
    const step = () => {
      generation.timer = undefined;
      if (generation.done) return;
      while (index < count) {
        const word = index === 0 ? words[0] : ` ${words[index]}`;
        index++;
        generatedTokens++;
        const writable = res.write(`${head}[{"index":0,"delta":{"content":${JSON.stringify(word)}},"finish_reason":null}]}${SSE_END}`);
        if (!writable) {
          res.once('drain', onDrain);
          return;
        }
        if (latency > 0 && index < count) {
          generation.timer = setTimeout(step, latency);
          return;
        }
      }
      finish();
    };
    function schedule() {
      if (generation.done) return;
      if (latency > 0) generation.timer = setTimeout(step, latency);
      else step();
    }
    res.write(`${head}[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}${SSE_END}`);
    schedule();
  }

  async function embeddings(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJsonObject(req, res);
    if (!body) return;
    if (typeof body.model !== 'string') return pydanticError(res, 'CreateEmbeddingRequest', 'model');
    if (body.input === undefined) return pydanticError(res, 'CreateEmbeddingRequest', 'input');
    const model = requireModel(body.model);
    requireAbility(model, 'embedding', 'creating embedding');
    const inputs: unknown[] =
      typeof body.input === 'string' || (Array.isArray(body.input) && body.input.every((item) => typeof item === 'number'))
        ? [body.input]
        : Array.isArray(body.input)
          ? body.input
          : [body.input];
    let tokens = 0;
    const data = inputs.map((input, index) => {
      const text = typeof input === 'string' ? input : JSON.stringify(input);
      tokens += typeof input === 'string' ? countWords(input) : Array.isArray(input) ? input.length : 1;
      return { index, object: 'embedding', embedding: unitVector(text, embeddingDimensions) };
    });
    sendJson(res, 200, {
      object: 'list',
      model: model.uid,
      model_replica: model.replicas[0]?.uid ?? model.uid,
      data,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
  }

  async function rerank(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJsonObject(req, res);
    if (!body) return;
    if (typeof body.model !== 'string') return pydanticError(res, 'RerankRequest', 'model');
    if (typeof body.query !== 'string') return pydanticError(res, 'RerankRequest', 'query');
    if (!Array.isArray(body.documents) || !body.documents.every((d) => typeof d === 'string')) return pydanticError(res, 'RerankRequest', 'documents');
    const model = requireModel(body.model);
    requireAbility(model, 'rerank', 'reranking');
    const query = body.query;
    const documents = body.documents as string[];
    const queryWords = new Set(words(query));
    const scored = documents.map((document, index) => {
      const docWords = words(document);
      const overlap = docWords.length === 0 ? 0 : docWords.filter((w) => queryWords.has(w)).length / docWords.length;
      const jitter = hashSeed(`${query}\u0000${document}`) / 0xffffffff;
      return { index, relevance_score: Number((0.7 * overlap + 0.3 * jitter).toFixed(6)), document };
    });
    scored.sort((a, b) => b.relevance_score - a.relevance_score || a.index - b.index);
    const topN = typeof body.top_n === 'number' ? Math.max(0, Math.floor(body.top_n)) : undefined;
    const picked = topN === undefined ? scored : scored.slice(0, topN);
    const inputTokens = countWords(query) + documents.reduce((sum, d) => sum + countWords(d), 0);
    sendJson(res, 200, {
      id: randomUUID(),
      results: picked.map((r) => ({ index: r.index, relevance_score: r.relevance_score, document: body.return_documents === true ? { text: r.document } : null })),
      meta: {
        api_version: null,
        billed_units: null,
        tokens: body.return_len === true ? { input_tokens: inputTokens, output_tokens: inputTokens } : null,
        warnings: null,
      },
    });
  }

  async function images(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJsonObject(req, res);
    if (!body) return;
    if (typeof body.model !== 'string') return pydanticError(res, 'TextToImageRequest', 'model');
    const model = requireModel(body.model);
    requireAbility(model, 'image', 'txt2img');
    const prompt = typeof body.prompt === 'string' ? body.prompt : JSON.stringify(body.prompt ?? '');
    const n = typeof body.n === 'number' && body.n > 0 ? Math.min(Math.floor(body.n), 10) : 1;
    const format = typeof body.response_format === 'string' ? body.response_format : 'url';
    const data = Array.from({ length: n }, (_, i) => {
      const b64 = tinyPng(`${prompt}\u0000${i}`).toString('base64');
      return format === 'b64_json' ? { url: null, b64_json: b64 } : { url: `data:image/png;base64,${b64}`, b64_json: null };
    });
    sendJson(res, 200, { created: Math.floor(Date.now() / 1000), data });
  }

  async function transcriptions(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const boundary = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(req.headers['content-type'] ?? '');
    const boundaryValue = boundary?.[1] ?? boundary?.[2];
    if (!boundaryValue) {
      req.resume();
      return sendJson(res, 422, { detail: [{ type: 'missing', loc: ['body', 'model'], msg: 'Field required', input: null }] });
    }
    const form = await readMultipart(req, boundaryValue);
    const missing = ['model', 'file'].filter((field) => (field === 'file' ? form.fileBytes === undefined : !form.fields.has(field)));
    if (missing.length > 0) {
      return sendJson(res, 422, { detail: missing.map((field) => ({ type: 'missing', loc: ['body', field], msg: 'Field required', input: null })) });
    }
    const model = requireModel(form.fields.get('model'));
    requireAbility(model, 'audio', 'creating transcriptions');
    const text = `Simulated transcription of ${form.fileBytes} bytes of audio.`;
    if (form.fields.get('response_format') === 'text') {
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(text) });
      res.end(text);
      return;
    }
    sendJson(res, 200, { text });
  }

  // ---------------------------------------------------------------- simulator controls

  function failNextLaunch(kind: LaunchFailureKind, modelUid?: string): void {
    if (kind !== 'error' && kind !== 'oom') throw new Error(`unknown launch failure kind: ${String(kind)}`);
    pendingFailures.push({ kind, modelUid });
  }

  function crash(modelUid: string, message?: string): boolean {
    const model = models.get(modelUid);
    if (!model || !model.live) return false;
    const reason = message ?? `Remote server unixsocket:///${model.replicas[0]?.subpoolAddress ?? modelUid} closed`;
    log?.warn({ model_uid: modelUid, reason }, 'cluster simulator: model crashed');
    if (model.status === 'CREATING') {
      failLaunch(model, runtimeError(reason));
      return true;
    }
    // Past the auto-recover limit the supervisor marks the model TERMINATED: it leaves the model list
    // and the instance list, and its requests fail.
    removeModel(model, reason);
    return true;
  }

  function gpus(): SimulatedGpu[] {
    return workers.flatMap((worker) =>
      worker.gpus.map((heldBy, index) => ({ worker: worker.name, address: worker.address, gpuType: worker.gpuType, index, memoryGb: worker.memoryGb, heldBy })),
    );
  }

  const running = () => [...models.values()].filter((m) => m.live && m.status === 'READY').map((m) => m.uid).sort();

  function state(): Record<string, unknown> {
    return {
      workers: workers.map((worker) => ({
        name: worker.name,
        address: worker.address,
        gpu_type: worker.gpuType,
        gpu_memory_gb: worker.memoryGb,
        gpus: worker.gpus.map((heldBy, index) => ({ index, held_by: heldBy })),
      })),
      models: [...models.values()].map((model) => ({
        model_uid: model.uid,
        model_name: model.name,
        model_type: model.type,
        status: model.status,
        live: model.live,
        replicas: model.replicas.map((r) => ({ replica_model_uid: r.uid, worker: r.worker?.name ?? null, gpu_idx: r.gpuIdx, status: r.status, error_message: r.errorMessage })),
      })),
      running: running(),
      launches: launches.map((l) => ({ model_uid: l.modelUid, body: l.body, wait_ready: l.waitReady, at: l.at.toISOString() })),
      terminations: terminations.map((t) => ({ model_uid: t.modelUid, at: t.at.toISOString() })),
      pending_failures: pendingFailures.map((f) => ({ kind: f.kind, model_uid: f.modelUid ?? null })),
      aborted_requests: abortedRequests,
      generated_tokens: generatedTokens,
      active_requests: activeGenerations.size,
      requests: { ...requests },
      settings: { model_load_ms: modelLoadMs, token_latency_ms: tokenLatencyMs, completion_tokens: completionTokens, embedding_dimensions: embeddingDimensions },
    };
  }

  async function simulatorRoute(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    if (req.method === 'GET' && path === '/_simulator/state') return sendJson(res, 200, state());
    if (req.method !== 'POST') return sendJson(res, 405, { detail: 'Method Not Allowed' });
    if (path.startsWith('/_simulator/crash/')) {
      req.resume();
      const uid = decodeURIComponent(path.slice('/_simulator/crash/'.length));
      return crash(uid) ? sendJson(res, 200, { crashed: uid }) : sendJson(res, 404, { detail: `Model not found in the model list, uid: ${uid}` });
    }
    const body = await readJsonObject(req, res, true);
    if (!body) return;
    switch (path) {
      case '/_simulator/fail-next-launch':
        if (body.kind !== 'error' && body.kind !== 'oom') return sendJson(res, 400, { detail: 'kind must be "error" or "oom"' });
        failNextLaunch(body.kind, typeof body.model_uid === 'string' ? body.model_uid : undefined);
        return sendJson(res, 200, { pending_failures: pendingFailures.length });
      case '/_simulator/model-load-ms':
      case '/_simulator/token-latency-ms': {
        if (typeof body.ms !== 'number' || !(body.ms >= 0)) return sendJson(res, 400, { detail: 'ms must be a number >= 0' });
        if (path === '/_simulator/model-load-ms') modelLoadMs = body.ms;
        else tokenLatencyMs = body.ms;
        return sendJson(res, 200, { ms: body.ms });
      }
      default:
        return sendJson(res, 404, { detail: 'Not Found' });
    }
  }

  // ---------------------------------------------------------------- routing

  let supervisorAddress = `${host}:0`;

  function count(route: string): void {
    requests[route] = (requests[route] ?? 0) + 1;
  }

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    const method = req.method ?? 'GET';
    const query = () => new URLSearchParams(q === -1 ? '' : url.slice(q + 1));

    if (authHeader && !UNAUTHENTICATED_PATHS.has(path) && req.headers.authorization !== authHeader) {
      count(`${method} ${routeName(path)}`);
      req.resume();
      res.setHeader('www-authenticate', 'Bearer');
      return sendJson(res, 401, { detail: 'Could not validate credentials' });
    }

    switch (`${method} ${path}`) {
      case 'POST /v1/chat/completions':
        count('POST /v1/chat/completions');
        return chatCompletions(req, res);
      case 'POST /v1/embeddings':
        count('POST /v1/embeddings');
        return embeddings(req, res);
      case 'POST /v1/rerank':
        count('POST /v1/rerank');
        return rerank(req, res);
      case 'POST /v1/images/generations':
        count('POST /v1/images/generations');
        return images(req, res);
      case 'POST /v1/audio/transcriptions':
        count('POST /v1/audio/transcriptions');
        return transcriptions(req, res);
      case 'GET /v1/models':
        count('GET /v1/models');
        return listModels(res);
      case 'POST /v1/models':
        count('POST /v1/models');
        return launchModel(req, res, query());
      case 'GET /v1/models/instances':
        count('GET /v1/models/instances');
        return instances(res, query());
      case 'GET /status':
        count('GET /status');
        return clusterStatus(res);
      case 'GET /v1/address':
        count('GET /v1/address');
        return sendJson(res, 200, supervisorAddress);
      case 'GET /v1/cluster/auth':
        count('GET /v1/cluster/auth');
        return sendJson(res, 200, { auth: Boolean(authHeader) });
      case 'GET /v1/cluster/info':
        count('GET /v1/cluster/info');
        return clusterInfo(res, query());
      case 'GET /v1/cluster/devices':
        count('GET /v1/cluster/devices');
        return sendJson(res, 200, Math.max(0, ...workers.map((w) => w.gpus.length)));
      case 'GET /v1/cluster/version':
        count('GET /v1/cluster/version');
        return sendJson(res, 200, { version: '0.0.0+cluster-simulator', 'full-revisionid': null });
      case 'GET /v1/workers':
        count('GET /v1/workers');
        return workersInfo(res);
      case 'GET /v1/supervisor':
        count('GET /v1/supervisor');
        return sendJson(res, 200, { supervisor_ip: supervisorAddress });
    }

    if (path.startsWith('/v1/models/')) {
      const rest = path.slice('/v1/models/'.length);
      const slash = rest.indexOf('/');
      const uid = decodeURIComponent(slash === -1 ? rest : rest.slice(0, slash));
      const tail = slash === -1 ? '' : rest.slice(slash);
      if (tail === '' && method === 'GET') {
        count('GET /v1/models/{model_uid}');
        return describeModel(res, uid);
      }
      if (tail === '' && method === 'DELETE') {
        count('DELETE /v1/models/{model_uid}');
        return terminateModel(res, uid);
      }
      if (tail === '/progress' && method === 'GET') {
        count('GET /v1/models/{model_uid}/progress');
        return progress(res, uid);
      }
      if (tail === '/cancel' && method === 'POST') {
        count('POST /v1/models/{model_uid}/cancel');
        return cancelLaunch(res, uid);
      }
    }
    if (path.startsWith('/_simulator/')) {
      count(`${method} ${routeName(path)}`);
      return simulatorRoute(req, res, path);
    }
    count('unmatched');
    req.resume();
    sendJson(res, 404, { detail: 'Not Found' });
  }

  const sockets = new Set<Socket>();
  const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    route(req, res).catch((error: unknown) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      if (error instanceof SimulatorError) {
        if (error.message.startsWith('Model is loading')) res.setHeader('retry-after', '30');
        sendJson(res, error.status, { detail: error.message });
        return;
      }
      const text = `Internal Server Error: ${error instanceof Error ? error.message : String(error)}`;
      res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(text) });
      res.end(text);
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
  log?.info({ url, workers: workers.map((w) => `${w.name} ${w.gpus.length}x${w.gpuType}`) }, 'cluster simulator (local stand-in for a GPU cluster running Xinference) started');

  let stopped: Promise<void> | undefined;
  return {
    url,
    stop() {
      stopped ??= (async () => {
        for (const model of models.values()) if (model.timer) clearTimeout(model.timer);
        for (const generation of [...activeGenerations]) generation.stop();
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        for (const socket of sockets) socket.destroy();
        await closed;
      })();
      return stopped;
    },
    failNextLaunch,
    crash,
    setModelLoadMs(ms: number) {
      modelLoadMs = nonNegative(ms, 'modelLoadMs');
    },
    setTokenLatencyMs(ms: number) {
      tokenLatencyMs = nonNegative(ms, 'tokenLatencyMs');
    },
    launches,
    terminations,
    get abortedRequests() {
      return abortedRequests;
    },
    get generatedTokens() {
      return generatedTokens;
    },
    requests,
    running,
    active: () => activeGenerations.size,
    gpus,
    state,
  };
}

// ---------------------------------------------------------------- helpers

function nonNegative(value: number, name: string): number {
  if (!Number.isFinite(value) || value < 0) throw new Error(`${name} must be a number >= 0`);
  return value;
}

function routeName(path: string): string {
  if (path.startsWith('/_simulator/crash/')) return '/_simulator/crash/{model_uid}';
  if (path.startsWith('/v1/models/') && path !== '/v1/models/instances') {
    return path.replace(/^\/v1\/models\/[^/]+/, '/v1/models/{model_uid}');
  }
  return path;
}

function workerHost(address: string): string {
  if (address.startsWith('[')) {
    const end = address.indexOf(']');
    if (end !== -1) return address.slice(1, end);
  }
  const colon = address.lastIndexOf(':');
  return colon !== -1 && /^\d+$/.test(address.slice(colon + 1)) ? address.slice(0, colon) : address;
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const data = JSON.stringify(body);
  res.writeHead(status, { 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(data) });
  res.end(data);
}

/** FastAPI answers a pydantic model that fails to parse inside a handler as an unhandled exception. */
function pydanticError(res: ServerResponse, schema: string, field: string): void {
  const text = `Internal Server Error: 1 validation error for ${schema}\n${field}\n  Field required [type=missing]`;
  res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** Python's repr of a list of strings or numbers, as Xinference puts it in its messages. */
function pyList(items: readonly unknown[]): string {
  return `[${items.map((item) => (typeof item === 'string' ? `'${item}'` : String(item))).join(', ')}]`;
}

function parseBool(value: string): boolean | undefined {
  const v = value.toLowerCase();
  if (['true', '1', 'on', 'yes', 't', 'y'].includes(v)) return true;
  if (['false', '0', 'off', 'no', 'f', 'n'].includes(v)) return false;
  return undefined;
}

function validateReplica(value: unknown): number {
  if (typeof value === 'boolean') throw valueError('Invalid input. The `replica` field must be an integer, got a boolean.');
  if (typeof value === 'number' && !Number.isInteger(value)) throw valueError('Invalid input. The `replica` field must be an integer, got a float.');
  const replica = typeof value === 'number' ? value : typeof value === 'string' && /^\s*[+-]?\d+\s*$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(replica)) throw valueError('Invalid input. The `replica` field must be a valid integer.');
  if (replica < 1) throw valueError('Invalid input. The `replica` field must be at least 1.');
  return replica;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
}

/** The JSON object of the body; answers (and returns undefined) when it is not one. */
async function readJsonObject(req: IncomingMessage, res: ServerResponse, emptyIsObject = false): Promise<Record<string, unknown> | undefined> {
  const raw = await readBody(req);
  if (raw.length === 0 && emptyIsObject) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8'));
  } catch {
    parsed = undefined;
  }
  if (isRecord(parsed)) return parsed;
  const text = 'Internal Server Error: Expecting a JSON object in the request body';
  res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(text) });
  res.end(text);
  return undefined;
}

function messageText(message: unknown): string {
  if (!isRecord(message)) return '';
  const content = message.content;
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => (isRecord(part) && typeof part.text === 'string' ? part.text : ''))
      .filter(Boolean)
      .join(' ');
  }
  return '';
}

function words(text: string): string[] {
  return text.toLowerCase().split(/[^\p{L}\p{N}]+/u).filter(Boolean);
}

function countWords(text: string): number {
  let n = 0;
  for (const part of text.split(/\s+/)) if (part) n++;
  return n;
}

function hashSeed(text: string): number {
  return createHash('sha256').update(text).digest().readUInt32LE(0);
}

/** mulberry32: a small, fast, seedable PRNG. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function answerWords(seedText: string, count: number): string[] {
  const random = prng(hashSeed(seedText));
  const out: string[] = [];
  for (let i = 0; i < count; i++) out.push(WORDS[Math.floor(random() * WORDS.length)] as string);
  return out;
}

function unitVector(text: string, dimensions: number): number[] {
  const random = prng(hashSeed(text));
  const vector = new Array<number>(dimensions);
  let norm = 0;
  for (let i = 0; i < dimensions; i++) {
    const value = random() * 2 - 1;
    vector[i] = value;
    norm += value * value;
  }
  norm = Math.sqrt(norm) || 1;
  for (let i = 0; i < dimensions; i++) vector[i] = (vector[i] as number) / norm;
  return vector;
}

/** A valid 8x8 single-colour PNG whose colour derives from the seed. */
function tinyPng(seed: string): Buffer {
  const size = 8;
  const colour = hashSeed(seed);
  const row = Buffer.alloc(1 + size * 3);
  for (let x = 0; x < size; x++) {
    row[1 + x * 3] = colour & 0xff;
    row[2 + x * 3] = (colour >>> 8) & 0xff;
    row[3 + x * 3] = (colour >>> 16) & 0xff;
  }
  const raw = Buffer.concat(Array.from({ length: size }, () => row));
  const header = Buffer.alloc(13);
  header.writeUInt32BE(size, 0);
  header.writeUInt32BE(size, 4);
  header[8] = 8; // bit depth
  header[9] = 2; // truecolour
  const chunk = (type: string, data: Buffer) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(data.length);
    const typed = Buffer.concat([Buffer.from(type, 'ascii'), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(typed) >>> 0);
    return Buffer.concat([length, typed, crc]);
  };
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', header),
    chunk('IDAT', deflateSync(raw)),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

interface MultipartForm {
  fields: Map<string, string>;
  /** Bytes of the `file` part, counted as they stream past; undefined when there is none. */
  fileBytes: number | undefined;
}

/**
 * Reads a multipart/form-data body as a stream: small fields are kept, the file part is only
 * counted, never held in memory beyond the current chunk.
 */
async function readMultipart(req: IncomingMessage, boundary: string): Promise<MultipartForm> {
  const delimiter = Buffer.from(`\r\n--${boundary}`);
  const headerEnd = Buffer.from('\r\n\r\n');
  const form: MultipartForm = { fields: new Map(), fileBytes: undefined };
  // The first delimiter has no leading CRLF; prepending one lets one search find them all.
  let buffer: Buffer = Buffer.from('\r\n');
  let phase: 'preamble' | 'after-delimiter' | 'headers' | 'body' | 'done' = 'preamble';
  let part: { name: string; isFile: boolean; value: Buffer[]; size: number } | undefined;

  const consume = (data: Buffer) => {
    if (!part || data.length === 0) return;
    if (part.isFile) {
      form.fileBytes = (form.fileBytes ?? 0) + data.length;
    } else if (part.size < 1024 * 1024) {
      part.value.push(data);
      part.size += data.length;
    }
  };
  const closePart = () => {
    if (part && !part.isFile) form.fields.set(part.name, Buffer.concat(part.value).toString('utf8'));
    if (part?.isFile && form.fileBytes === undefined) form.fileBytes = 0;
    part = undefined;
  };

  for await (const chunk of req) {
    if (phase === 'done') continue;
    buffer = buffer.length === 0 ? (chunk as Buffer) : Buffer.concat([buffer, chunk as Buffer]);
    for (;;) {
      if (phase === 'preamble' || phase === 'body') {
        const at = buffer.indexOf(delimiter);
        if (at === -1) {
          const keep = Math.min(buffer.length, delimiter.length - 1);
          if (phase === 'body') consume(buffer.subarray(0, buffer.length - keep));
          buffer = Buffer.from(buffer.subarray(buffer.length - keep));
          break;
        }
        if (phase === 'body') {
          consume(buffer.subarray(0, at));
          closePart();
        }
        buffer = buffer.subarray(at + delimiter.length);
        phase = 'after-delimiter';
      } else if (phase === 'after-delimiter') {
        if (buffer.length < 2) break;
        if (buffer[0] === 0x2d && buffer[1] === 0x2d) {
          phase = 'done';
          break;
        }
        const lineEnd = buffer.indexOf('\r\n');
        if (lineEnd === -1) break;
        buffer = buffer.subarray(lineEnd + 2);
        phase = 'headers';
      } else if (phase === 'headers') {
        const at = buffer.indexOf(headerEnd);
        if (at === -1) {
          if (buffer.length > 16 * 1024) throw new Error('multipart part headers too large');
          break;
        }
        const headers = buffer.subarray(0, at).toString('utf8');
        buffer = buffer.subarray(at + headerEnd.length);
        const disposition = /content-disposition:[^\r\n]*/i.exec(headers)?.[0] ?? '';
        const name = /\bname="([^"]*)"/i.exec(disposition)?.[1] ?? '';
        part = { name, isFile: /\bfilename="/i.test(disposition) || name === 'file', value: [], size: 0 };
        phase = 'body';
      } else {
        break;
      }
    }
  }
  return form;
}
