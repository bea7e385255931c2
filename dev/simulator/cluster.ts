import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { EngineEventCollector } from './events.ts';
import { notReady, pyList, runtimeError, SimulatorError, valueError, workerHost } from './http.ts';
import { familyAbilities, launchProblem } from './model-registry.ts';
import { normalizeReplicaConfig, type DeviceConfig, type ReplicaConfig } from './replica-config.ts';

/**
 * The simulated cluster's state: workers and their GPUs, models and their replicas, and the
 * lifecycle of a launch, a termination, a cancel and a crash as a Xinference 3.x supervisor and its
 * workers play them (`xinference/core/supervisor.py`, `xinference/core/worker.py`,
 * `xinference/core/status_guard.py`; line numbers of v3.2.0+61, commit 7ecec16b6). Nothing runs on
 * a GPU: GPUs are bookkeeping, loads are timers.
 */

export interface SimulatedWorker {
  name: string;
  /** The GPU's name as NVML reports it, which Xinference passes on unchanged ("NVIDIA A100-SXM4-80GB"). */
  gpuName: string;
  gpuCount: number;
  gpuMemoryGb: number;
  /** The worker address Xinference reports (`host:port`); defaults to `<name>:30001`. */
  address?: string;
}

export type LaunchFailureKind = 'error' | 'oom';
export type SimulatorLog = Pick<Logger, 'info' | 'warn'>;

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
  gpuName: string;
  index: number;
  memoryGb: number;
  /** The first replica model uid on this GPU, or null when idle. */
  heldBy: string | null;
  /** Every replica on this GPU (GPUs are shared by default). */
  holders: string[];
}

export interface ClusterSettings {
  modelLoadMs: number;
  /** XINFERENCE_ALLOW_MULTI_REPLICA_PER_GPU (on by default: GPUs are shared). */
  allowMultiReplicaPerGpu: boolean;
  /** XINFERENCE_MODEL_ACTOR_AUTO_RECOVER_LIMIT (null by default: a dead model is recreated without limit). */
  autoRecoverLimit: number | null;
  /** How long a DELETE takes (Xinference: 5 to 36 s of actor teardown and VRAM reclaim). */
  terminateMs: number;
  /** The Xinference version played (worker_ip semantics differ before 3.2, which added scale-ups). */
  version: string;
  /**
   * Requests a replica generates at once; more wait in its queue (null: no limit, the default).
   * vLLM's scheduler runs at most `max_num_seqs` sequences and queues the rest, first come first
   * served (`vllm/v1/core/sched/scheduler.py`): this is that limit, small enough for tests.
   */
  replicaConcurrency: number | null;
  /** Check launches against Xinference's builtin model families (an unknown combination fails). */
  checkModels: boolean;
  log?: SimulatorLog | undefined;
}

type InstanceStatus = 'CREATING' | 'READY' | 'ERROR' | 'TERMINATING' | 'TERMINATED';
type ReplicaStatus = 'CREATING' | 'READY' | 'ERROR' | 'TERMINATING' | 'TERMINATED';

/** `POST /v1/models/{uid}/replicas`'s answer (`core/supervisor.py`, `_add_model_replica`). */
export interface AddedReplica {
  replica_id: number;
  replica_model_uid: string;
  worker_address: string;
}

/** A request waiting for a slot on its replica. */
interface Waiter {
  res: ServerResponse;
  admit(): void;
  fail(error: SimulatorError): void;
}

interface WorkerState {
  name: string;
  address: string;
  gpuName: string;
  memoryGb: number;
  /** Replica model uids on each GPU. */
  gpus: Set<string>[];
}

interface Replica {
  id: number;
  uid: string;
  worker: WorkerState | undefined;
  gpuIdx: number[];
  /** The gpu_idx the launch pinned, reported in the replica status (null when auto-placed). */
  pinnedGpuIdx: number[] | null;
  /** The `n_gpu` its worker was launched with (what a scale-up copies: `core/worker.py`, `get_launch_args`). */
  nGpu: unknown;
  /** The user-facing label (`replica_uid`): a scale-up's `<uid>-<replica id>` or its config's; null for a launch's replica. */
  label: string | null;
  createdTs: number;
  status: ReplicaStatus;
  /** The worker's model state: '' while launching, then ready, error or stopping. */
  modelState: string;
  errorMessage: string | null;
  subpoolAddress: string;
  /** GB this replica takes on each of its GPUs. */
  memoryGb: number;
  /** In the supervisor's route table (`_replica_model_uid_to_worker`): it serves and can be deleted. */
  routed: boolean;
  /**
   * Among the model's active replicas (`ReplicaInfo.active_replica_ids`): a replica evicted after
   * its recover budget is not, nor one a scale-up is still loading.
   */
  active: boolean;
  /** Requests routed to it (the simulator's count, for tests and the state). */
  requests: number;
  /** The answers it is generating now (each holds a slot until it ends), and those waiting for one. */
  serving: Set<ServerResponse>;
  queue: Waiter[];
}

export interface Model {
  uid: string;
  name: string;
  type: string;
  engine: string | null;
  format: string | null;
  sizeInBillions: number | string | null;
  quantization: string | null;
  replicaCount: number;
  /** In the supervisor's replica info (`_model_uid_to_replica_info`): launched, not terminated, cancelled or failed. */
  registered: boolean;
  /** The worker's launch guard: held until the engine's `load()` returns; `/cancel` works only while it is. */
  launching: boolean;
  /** Dropped from the instance list (TERMINATED). */
  dropped: boolean;
  /** Being recreated after a crash (`core/worker.py`, `recover_model`): its spec is gone until it is ready again. */
  recovering: boolean;
  status: InstanceStatus;
  abilities: string[];
  createdTs: number;
  startedAt: number;
  loadMs: number;
  recoveriesLeft: number | null;
  replicas: Replica[];
  /**
   * The next of the routed replicas to serve: the supervisor cycles through the active replica ids
   * (`core/supervisor.py`, `get_model`: `next(replica_info.scheduler)`, an `itertools.cycle`
   * rebuilt from the lowest id whenever a replica is added or removed, `_refresh_replica_scheduler`).
   */
  nextReplica: number;
  timers: Set<NodeJS.Timeout>;
  waiters: ((error: SimulatorError | undefined) => void)[];
  /** In-flight generations, failed when the model (or the replica serving them) dies. */
  generations: Set<{ res: ServerResponse; fail(message: string): void }>;
}

export class SimulatedCluster {
  readonly workers: WorkerState[];
  readonly models = new Map<string, Model>();
  /** Models the supervisor forgot (a cancel after `load()`): they still load, serve nobody, hold GPUs. */
  readonly orphans = new Set<Model>();
  readonly launches: LaunchRecord[] = [];
  readonly terminations: TerminationRecord[] = [];
  readonly pendingFailures: { kind: LaunchFailureKind; modelUid: string | undefined }[] = [];
  readonly settings: ClusterSettings;
  /** The supervisor's event collector: what `GET /v1/models/{uid}/events` answers (`events.ts`). */
  readonly events = new EngineEventCollector();
  /**
   * The replica statuses the status guard keeps of a model that is gone, until its uid is launched
   * again (`core/status_guard.py`: a terminated instance is dropped from the lists, not from
   * `get_replica_statuses`).
   */
  readonly #retired = new Map<string, Record<string, unknown>[]>();
  /**
   * Scale changes of a model, one at a time: `core/supervisor.py` holds a lock per model uid
   * (`_get_model_replica_lock`) around adding a replica, deleting one and terminating the model.
   */
  readonly #locks = new Map<string, Promise<void>>();
  /** Loads of replicas a scale-up adds (a model's own timers belong to its active replicas). */
  readonly #scaleTimers = new Set<NodeJS.Timeout>();
  #subpoolPort = 40000;

  constructor(workers: SimulatedWorker[], settings: ClusterSettings) {
    this.settings = settings;
    this.workers = workers.map((spec) => ({
      name: spec.name,
      address: spec.address ?? `${spec.name}:30001`,
      gpuName: spec.gpuName,
      memoryGb: spec.gpuMemoryGb,
      gpus: Array.from({ length: spec.gpuCount }, () => new Set<string>()),
    }));
  }

  get log(): SimulatorLog | undefined {
    return this.settings.log;
  }

  // ------------------------------------------------------------------ launch

  /**
   * `POST /v1/models` (`api/restful_api.py`, `launch_model`; `core/supervisor.py`,
   * `launch_builtin_model`). Synchronous checks answer 400; the launch itself runs in the
   * background (`wait_ready=false`), registered as CREATING before the answer, and fails there
   * (instance ERROR with the replica's `error_message`).
   */
  async launch(body: Record<string, unknown>, waitReady: boolean): Promise<string> {
    const modelType = typeof body.model_type === 'string' ? body.model_type : 'LLM';
    const replicaCount = validateReplica('replica' in body ? body.replica : 1);
    const modelName = body.model_name;
    // restful_api.py, launch_model: required fields.
    if (!modelName || typeof modelName !== 'string') throw valueError('Invalid input. Please specify the `model_name` field.');
    if (!body.model_engine && modelType === 'LLM') throw valueError('Invalid input. Please specify the `model_engine` field.');
    let gpuIdx: number[] | null = null;
    if (body.gpu_idx !== undefined && body.gpu_idx !== null) {
      gpuIdx = Array.isArray(body.gpu_idx) ? (body.gpu_idx as number[]) : [body.gpu_idx as number];
      if (gpuIdx.length > 0 && gpuIdx.length % replicaCount !== 0) throw valueError('Invalid input. Allocated gpu must be a multiple of replica.');
      if (gpuIdx.length === 0) gpuIdx = null;
    }
    if ('wait_ready' in body) {
      // wait_ready is a query parameter; in the body it is passed on as a second keyword argument.
      throw new SimulatorError(500, "launch_builtin_model() got multiple values for keyword argument 'wait_ready'");
    }
    const candidates = body.worker_ip !== undefined && body.worker_ip !== null ? this.#resolveWorkers(body.worker_ip) : this.workers;
    if (typeof body.request_limits === 'number' && body.request_limits < 0) throw valueError('The `request_limits` parameter must be greater or equal than 0.');
    let uid = typeof body.model_uid === 'string' ? body.model_uid : null;
    if (uid === null) uid = this.models.get(modelName)?.registered ? `${modelName}-${randomUUID().slice(0, 8)}` : modelName;
    // core/utils.py, is_valid_model_uid.
    if (!uid.trim() || uid.length > 100 || /^.+-rep\d+$/.test(uid)) {
      throw valueError("The model UID is invalid. Please specify the model UID by 0 < length <= 100, not ending with the reserved replica suffix '-rep<number>'.");
    }
    this.launches.push({ modelUid: uid, body, waitReady, at: new Date() });
    if (this.models.get(uid)?.registered) throw valueError(`Model is already in the model list, uid: ${uid}`);

    const model: Model = {
      uid,
      name: modelName,
      type: modelType,
      engine: typeof body.model_engine === 'string' ? body.model_engine : null,
      format: typeof body.model_format === 'string' ? body.model_format : null,
      sizeInBillions: typeof body.model_size_in_billions === 'number' || typeof body.model_size_in_billions === 'string' ? body.model_size_in_billions : null,
      quantization: typeof body.quantization === 'string' ? body.quantization : null,
      replicaCount,
      registered: true,
      launching: true,
      dropped: false,
      recovering: false,
      status: 'CREATING',
      abilities: [],
      createdTs: Math.floor(Date.now() / 1000),
      startedAt: Date.now(),
      loadMs: this.settings.modelLoadMs,
      recoveriesLeft: this.settings.autoRecoverLimit,
      replicas: [],
      nextReplica: 0,
      timers: new Set(),
      waiters: [],
      generations: new Set(),
    };
    this.models.set(uid, model);
    this.#retired.delete(uid);
    this.log?.info({ model_uid: uid, model_name: modelName, model_type: modelType, wait_ready: waitReady }, 'cluster simulator: launching model');
    const done = waitReady ? new Promise<SimulatorError | undefined>((resolve) => model.waiters.push(resolve)) : undefined;
    try {
      // supervisor.py, _launch_model: a replica uid still routed (an orphan) refuses the launch.
      const routedReplica = [...this.orphans].flatMap((m) => m.replicas).find((r) => r.routed && r.uid.startsWith(`${uid}-rep`));
      if (routedReplica) throw valueError(`Model is already in the model list, uid: ${routedReplica.uid}`);
      this.#place(model, 'n_gpu' in body ? body.n_gpu : 'auto', candidates, gpuIdx);
      this.#report(model.replicas, 'INFO', 'Launch model');
      // model/llm/core.py, create_llm_model_instance: an unknown combination fails in the worker.
      const problem = this.settings.checkModels ? launchProblem(model) : undefined;
      if (problem) this.#after(model, Math.floor(model.loadMs * 0.1), () => this.#failLaunch(model, new SimulatorError(400, problem)));
      else this.#startLoading(model);
    } catch (error) {
      // A worker that refuses a replica has already reported it CREATING; the supervisor failing to
      // find any worker does so before a replica exists, and leaves no message.
      const id = model.replicas.length;
      const beforeReplicas = error instanceof SimulatorError && error.message === 'No available worker found';
      if (id < model.replicaCount && !beforeReplicas) {
        model.replicas.push(this.#replica(model, id, candidates[0], [], null, 0, 'n_gpu' in body ? body.n_gpu : 'auto'));
      }
      // Every replica a worker was asked to launch reported it first (the supervisor's own refusals come before any).
      this.#report(model.replicas, 'INFO', 'Launch model');
      this.#failLaunch(model, error instanceof SimulatorError ? error : new SimulatorError(500, String(error)));
    }
    if (done) {
      const error = await done;
      if (error) throw error;
    }
    return uid;
  }

  /**
   * `worker_ip` (`core/supervisor.py`, `_resolve_worker_addresses`): from 3.2.0 a full `host:port`
   * picks that worker and a bare host every worker on it; before, only the host part was compared.
   */
  #resolveWorkers(workerIp: unknown): WorkerState[] {
    const exact = versionAtLeast(this.settings.version, 3, 2);
    const entries = (Array.isArray(workerIp) ? workerIp : [workerIp])
      .flatMap((item) => String(item).split(','))
      .map((entry) => entry.trim())
      .filter(Boolean);
    const resolved: WorkerState[] = [];
    for (const entry of entries) {
      const matches = this.workers.filter((w) => (exact ? w.address === entry || workerHost(w.address) === entry : w.address.split(':')[0] === entry));
      if (matches.length === 0) throw valueError(`Worker ip address ${entry} is not in the cluster.`);
      for (const match of matches) if (!resolved.includes(match)) resolved.push(match);
    }
    return resolved;
  }

  /**
   * Places every replica and takes its GPUs, or throws what the worker raises. Shared GPUs (the
   * default): the least-loaded GPUs by model count (`core/launch_strategy.py`,
   * `IdleFirstLaunchStrategy`; `core/worker.py`, `allocate_devices`); an over-subscribed GPU shows
   * up later as an out-of-memory load. Exclusive GPUs: idle ones only, else "No available slot".
   */
  #place(model: Model, nGpu: unknown, candidates: WorkerState[], gpuIdx: number[] | null): void {
    if (candidates.length === 0) throw runtimeError('No available worker found');
    let perReplica: number;
    if (nGpu === null) perReplica = 0;
    else if (nGpu === undefined || nGpu === 'auto') perReplica = 1;
    else if (typeof nGpu === 'number' && Number.isInteger(nGpu)) perReplica = nGpu;
    else throw valueError('Currently `n_gpu` only supports `auto`.');
    const maxGpus = Math.max(...candidates.map((w) => w.gpus.length));
    if (gpuIdx === null && nGpu !== null && (perReplica <= 0 || perReplica > maxGpus)) {
      throw valueError(`The parameter \`n_gpu\` must be greater than 0 and not greater than the number of GPUs: ${maxGpus} on the machine.`);
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
        const ordered = [...candidates].sort((a, b) => this.#modelCount(a) - this.#modelCount(b) || a.address.localeCompare(b.address));
        worker = ordered.find((w) => wanted.every((i) => w.gpus[i]?.size === 0)) ?? ordered[0];
        if (!worker) throw runtimeError('No available worker found');
        const target = worker;
        if (!wanted.every((i) => Number.isInteger(i) && i >= 0 && i < target.gpus.length)) {
          throw valueError(
            `Worker ${target.address} cannot use the GPUs with these indexes: ${pyList(wanted)}. ` +
              `Worker ${target.address} can only see these GPUs: ${pyList(target.gpus.map((_, i) => i))}.`,
          );
        }
        const busy = wanted.find((i) => (target.gpus[i]?.size ?? 0) > 0);
        if (busy !== undefined && !this.settings.allowMultiReplicaPerGpu) {
          throw runtimeError(`GPU index ${busy} has been occupied with models: ${pyList([...(target.gpus[busy] ?? [])])}, and multi-replica-per-GPU is disabled.`);
        }
        chosen = wanted;
      } else if (this.settings.allowMultiReplicaPerGpu) {
        let best: { worker: WorkerState; gpus: number[]; score: number } | undefined;
        for (const candidate of [...candidates].sort((a, b) => a.address.localeCompare(b.address))) {
          if (candidate.gpus.length < perReplica) continue;
          const loads = candidate.gpus.map((holders, index) => [holders.size, index] as const).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
          const picked = loads.slice(0, perReplica);
          const score = picked.reduce((sum, [load]) => sum + load, 0);
          if (!best || score < best.score) best = { worker: candidate, gpus: picked.map(([, index]) => index).sort((a, b) => a - b), score };
        }
        if (!best) throw runtimeError('No available worker found');
        worker = best.worker;
        chosen = best.gpus;
      } else {
        const fitting = candidates
          .filter((w) => idleGpus(w).length >= perReplica)
          .sort((a, b) => this.#modelCount(a) - this.#modelCount(b) || a.address.localeCompare(b.address));
        worker = fitting[0];
        if (!worker) throw runtimeError(perReplica > 0 ? 'No available slot found for the model' : 'No available worker found');
        chosen = idleGpus(worker).slice(0, perReplica);
      }
      for (const index of chosen) worker.gpus[index]?.add(uid);
      model.replicas.push(this.#replica(model, id, worker, chosen, pinned, memoryPerGpu(model, worker, chosen.length), nGpu));
    }
  }

  #replica(model: Model, id: number, worker: WorkerState | undefined, gpuIdx: number[], pinned: number[] | null, memoryGb: number, nGpu: unknown): Replica {
    return {
      id,
      uid: `${model.uid}-rep${id}`,
      worker,
      gpuIdx,
      pinnedGpuIdx: pinned,
      nGpu,
      label: null,
      createdTs: Math.floor(Date.now() / 1000),
      status: 'CREATING',
      modelState: '',
      errorMessage: null,
      subpoolAddress: worker ? `${workerHost(worker.address)}:${this.#subpoolPort++}` : '',
      memoryGb,
      routed: false,
      active: true,
      requests: 0,
      serving: new Set(),
      queue: [],
    };
  }

  #modelCount(worker: WorkerState): number {
    let count = 0;
    for (const model of this.models.values()) if (model.registered) count += model.replicas.filter((r) => r.worker === worker).length;
    return count;
  }

  /**
   * The load, in three steps (`core/worker.py`, `launch_builtin_model`, `wait_for_load`;
   * `core/supervisor.py`, `_launch_one_model`):
   * 1. half-way, the engine's `load()` returns (vLLM only starts its loading thread): the worker
   *    drops its launch guard and reports the instance READY, while the replica stays CREATING
   *    and is not routed: `GET /v1/models/{uid}` and inference answer 503 with Retry-After;
   * 2. at three quarters, an engine-init failure or an out-of-memory GPU surfaces in
   *    `wait_for_load`: the replica and the instance go ERROR, the GPUs are freed;
   * 3. at the end, `wait_for_load` returns: the replica is READY and routed.
   */
  #startLoading(model: Model): void {
    const index = this.pendingFailures.findIndex((f) => f.modelUid === undefined || f.modelUid === model.uid);
    const injected = index >= 0 ? this.pendingFailures.splice(index, 1)[0] : undefined;
    this.#after(model, Math.floor(model.loadMs * 0.5), () => this.#loaded(model));
    this.#after(model, Math.floor(model.loadMs * 0.75), () => {
      const failure = injected ? launchFailure(injected.kind, model) : this.#outOfMemory(model);
      if (!failure) return;
      // core/worker.py, wait_for_load: the worker's cleanup of a failed load terminates the replica.
      this.#report(model.replicas, 'INFO', 'Terminate model');
      this.#failLaunch(model, failure);
    });
    this.#after(model, model.loadMs, () => this.#routed(model));
  }

  #loaded(model: Model): void {
    model.launching = false;
    model.status = 'READY';
    // core/worker.py, _get_model_ability: the family's abilities (some LLMs only `generate`).
    model.abilities = (this.settings.checkModels ? familyAbilities(model.type, model.name) : undefined) ?? abilities(model);
  }

  #routed(model: Model): void {
    for (const replica of model.replicas) {
      replica.status = 'READY';
      replica.modelState = 'ready';
      replica.routed = true;
    }
    this.log?.info({ model_uid: model.uid, gpus: model.replicas.map((r) => `${r.worker?.name}:${r.gpuIdx.join(',')}`) }, 'cluster simulator: model ready');
    settle(model, undefined);
  }

  /** A GPU holding more than it has: vLLM refuses to start, other engines run out of CUDA memory. */
  #outOfMemory(model: Model, replicas: Replica[] = model.replicas): SimulatorError | undefined {
    for (const replica of replicas) {
      const worker = replica.worker;
      if (!worker) continue;
      for (const index of replica.gpuIdx) {
        const used = [...(worker.gpus[index] ?? [])].reduce((sum, uid) => sum + (this.#replicaByUid(uid)?.memoryGb ?? 0), 0);
        if (used <= worker.memoryGb) continue;
        const free = Math.max(0, worker.memoryGb - (used - replica.memoryGb));
        if (isVllm(model)) {
          return runtimeError(
            `Free memory on device (${free.toFixed(2)}/${worker.memoryGb.toFixed(2)} GiB) on startup is less than desired GPU memory utilization ` +
              `(0.9, ${(worker.memoryGb * 0.9).toFixed(2)} GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.`,
          );
        }
        return launchFailure('oom', model);
      }
    }
    return undefined;
  }

  #replicaByUid(uid: string): Replica | undefined {
    for (const model of [...this.models.values(), ...this.orphans]) {
      const replica = model.replicas.find((r) => r.uid === uid);
      if (replica) return replica;
    }
    return undefined;
  }

  /**
   * A launch that failed after it started: the GPUs are freed and the uid leaves the replica info
   * (a relaunch is accepted), while the instance stays listed as ERROR with the replica's message
   * (`core/supervisor.py`, `_launch_model`'s except: `terminate_model(suppress_exception=True)`).
   */
  #failLaunch(model: Model, error: SimulatorError): void {
    this.#clearTimers(model);
    this.#releaseGpus(model);
    model.registered = false;
    model.launching = false;
    model.status = 'ERROR';
    for (const replica of model.replicas) {
      replica.status = 'ERROR';
      replica.modelState = 'error';
      replica.errorMessage = error.message;
      replica.routed = false;
    }
    this.log?.warn({ model_uid: model.uid, error: error.message }, 'cluster simulator: model launch failed');
    settle(model, error);
  }

  // ------------------------------------------------------------------ terminate, cancel

  /**
   * `DELETE /v1/models/{uid}` (`core/supervisor.py`, `terminate_model`): an unknown uid is 400
   * "not found"; a replica not routed yet (still loading) is 400 "not found … -rep0" and nothing
   * changes; otherwise the worker tears the model down (TERMINATING, then TERMINATED: dropped from
   * the instance list) and the GPUs are freed.
   */
  terminate(uid: string): Promise<void> {
    return this.#serialized(uid, () => this.#terminate(uid));
  }

  async #terminate(uid: string): Promise<void> {
    const model = this.models.get(uid);
    if (!model || !model.registered) throw valueError(`Model not found in the model list, uid: ${uid}`);
    const active = model.replicas.filter((replica) => replica.active);
    const unrouted = active.find((replica) => !replica.routed);
    if (unrouted) throw valueError(`Model not found in the model list, uid: ${unrouted.uid}`);
    // `core/worker.py`, `terminate_model`: the worker relaunching a recovering model holds its launch guard.
    const relaunching = model.recovering && model.launching ? active[0] : undefined;
    if (relaunching) throw valueError(`${relaunching.uid} is launching`);
    model.status = 'TERMINATING';
    for (const replica of active) {
      replica.status = 'TERMINATING';
      replica.modelState = 'stopping';
    }
    this.#report(active, 'INFO', 'Terminate model');
    if (this.settings.terminateMs > 0) await new Promise((resolve) => setTimeout(resolve, this.settings.terminateMs));
    // core/worker.py, terminate_model: each replica's state ends "stopped" (TERMINATED).
    for (const replica of active) replica.status = 'TERMINATED';
    this.#remove(model, `Remote server unixsocket:///${model.replicas[0]?.subpoolAddress ?? uid} closed`);
    this.terminations.push({ modelUid: uid, at: new Date() });
    this.log?.info({ model_uid: uid }, 'cluster simulator: model terminated');
  }

  /**
   * `POST /v1/models/{uid}/cancel` (`core/supervisor.py`, `cancel_launch_builtin_model`;
   * `core/worker.py`, `cancel_launch_model`). While the worker holds its launch guard (before the
   * engine's `load()` returned) the launch is cancelled: ERROR, GPUs freed. After it, the worker's
   * RuntimeError is swallowed, the supervisor forgets the uid anyway and answers 200, and the load
   * goes on: the model ends up serving, holding its GPUs, and no DELETE can reach it.
   */
  cancel(uid: string): void {
    const model = this.models.get(uid);
    if (!model || !model.registered) throw new SimulatorError(500, `Model ${uid} has not been launched yet`);
    if (model.launching) {
      this.#failLaunch(model, new SimulatorError(500, 'Launch cancelled'));
      return;
    }
    model.registered = false;
    this.models.delete(uid);
    this.orphans.add(model);
    this.log?.warn({ model_uid: uid }, 'cluster simulator: cancel after load() is a no-op; the model keeps loading, unreachable');
  }

  #remove(model: Model, message: string): void {
    this.#clearTimers(model);
    this.#releaseGpus(model);
    model.registered = false;
    model.dropped = true;
    for (const replica of model.replicas) {
      replica.routed = false;
      failQueue(replica, message);
    }
    this.models.delete(model.uid);
    this.#retired.set(model.uid, this.#statusRows(model));
    for (const generation of [...model.generations]) generation.fail(message);
  }

  // ------------------------------------------------------------------ replicas (scale up and down)

  /**
   * `GET /v1/models/{uid}/replicas` (`api/restful_api.py`, `get_model_replicas`; `core/supervisor.py`,
   * `get_replica_statuses`): the status guard's replica statuses, with the address and devices of
   * each routed replica. A uid the status guard never saw answers `[]`, not an error; a terminated
   * model its replicas TERMINATED; a model whose last replica was deleted `[]`. Before 3.2 the
   * answer had no `model_address`, `accelerators`, `replica_uid` or `gpu_idx`.
   */
  replicaStatuses(uid: string): Record<string, unknown>[] {
    const model = this.models.get(uid) ?? [...this.orphans].find((m) => m.uid === uid);
    return model ? this.#statusRows(model) : (this.#retired.get(uid) ?? []);
  }

  #statusRows(model: Model): Record<string, unknown>[] {
    const since32 = versionAtLeast(this.settings.version, 3, 2);
    return model.replicas.map((replica) => ({
      replica_id: replica.id,
      replica_model_uid: replica.uid,
      worker_address: replica.worker?.address ?? '',
      ...(since32 ? { model_address: replica.routed ? replica.subpoolAddress : null, accelerators: replica.routed ? replica.gpuIdx.map(String) : null } : {}),
      status: replica.status,
      created_ts: replica.createdTs,
      error_message: replica.errorMessage,
      ...(since32 ? { replica_uid: replica.label, gpu_idx: replica.pinnedGpuIdx } : {}),
    }));
  }

  /**
   * `POST /v1/models/{uid}/replicas` (Xinference 3.2: `api/restful_api.py`, `add_model_replica`;
   * `core/supervisor.py`, `add_model_replica`, `_add_model_replica`): one more replica of a running
   * model, answered once it is loaded. Its id is one more than the highest active one (so a deleted
   * highest id comes back), its uid `<uid>-rep<id>`, its label `<uid>-<id>`; scale changes of a
   * model are serialized, so concurrent adds get distinct ids one load after the other. Placement:
   * the config's worker (and GPUs), else the least-loaded GPUs of the workers with room
   * (`_select_worker_for_scale_up` with the default IdleFirst strategy; with exclusive GPUs only
   * workers with enough idle ones, else 503 "No worker has capacity for N GPU(s)"), for as many
   * GPUs as the lowest replica was launched with. The replica shows CREATING until it is READY,
   * and serves only then. A load that fails frees its GPUs and drops its status, and answers the
   * load's error; the worker's cleanup (`core/worker.py`, `terminate_model(is_model_die=True)`)
   * leaves the instance ERROR although the model serves on, until a later scale change.
   */
  addReplica(uid: string, config: ReplicaConfig | null): Promise<AddedReplica> {
    return this.#serialized(uid, async () => {
      const model = this.models.get(uid);
      if (!model || !model.registered) throw valueError(`Model not found in the model list, uid: ${uid}`);
      const active = model.replicas.filter((r) => r.active).sort((a, b) => a.id - b.id);
      const lowest = active[0];
      if (!lowest) throw valueError(`Model has no active replicas, uid: ${uid}`);
      const id = Math.max(...active.map((r) => r.id)) + 1;
      // The launch args are read from the lowest replica's worker, known once that replica is routed.
      if (!lowest.routed) throw valueError(`Cannot find worker for existing replica: ${lowest.uid}`);
      let label = `${uid}-${id}`;
      let target: { worker: WorkerState; gpuIdx: number[] | null; nGpu: unknown };
      if (config) {
        label = normalizeReplicaConfig(config, label);
        target = this.#resolvePlacement(config.devices[0] as DeviceConfig);
      } else {
        // A legacy launch cached n_gpu "auto" beside explicit indexes: their count is kept.
        const nGpu = lowest.nGpu === 'auto' && lowest.pinnedGpuIdx?.length ? lowest.pinnedGpuIdx.length : lowest.nGpu;
        target = { ...this.#selectForScaleUp(nGpu), nGpu };
      }
      if (model.replicas.some((r) => r.label === label)) throw valueError(`Replica uid already exists for model ${uid}: ${label}`);

      // Registered CREATING before the worker's launch, which may still refuse it ("No available slot").
      const { worker } = target;
      const replica = this.#replica(model, id, worker, [], target.gpuIdx, 0, target.nGpu);
      replica.label = label;
      replica.active = false;
      model.replicas.push(replica);
      // core/worker.py, launch_builtin_model: reported before the worker allocates its GPUs.
      this.#report([replica], 'INFO', 'Launch model');
      try {
        replica.gpuIdx = target.gpuIdx ?? this.#allocate(worker, target.nGpu);
        replica.memoryGb = memoryPerGpu(model, worker, replica.gpuIdx.length);
        for (const index of replica.gpuIdx) worker.gpus[index]?.add(replica.uid);
        this.log?.info({ model_uid: uid, replica_model_uid: replica.uid, worker: worker.name, gpu_idx: replica.gpuIdx }, 'cluster simulator: adding a replica');
        await this.#loadReplica(model, replica);
      } catch (error) {
        if (replica.worker) for (const index of replica.gpuIdx) replica.worker.gpus[index]?.delete(replica.uid);
        model.replicas = model.replicas.filter((r) => r !== replica);
        model.replicaCount = model.replicas.length;
        if (model.registered) model.status = 'ERROR';
        this.log?.warn({ model_uid: uid, replica_model_uid: replica.uid, error: (error as Error).message }, 'cluster simulator: adding a replica failed');
        throw error;
      }
      replica.status = 'READY';
      replica.modelState = 'ready';
      replica.routed = true;
      replica.active = true;
      model.nextReplica = 0;
      model.replicaCount = model.replicas.filter((r) => r.active).length;
      this.log?.info({ model_uid: uid, replica_model_uid: replica.uid }, 'cluster simulator: replica ready');
      return { replica_id: id, replica_model_uid: replica.uid, worker_address: worker.address };
    });
  }

  /**
   * A scale-up's load, as a launch's (`#startLoading`): half-way the worker's launch returns and
   * reports the instance READY; at three quarters an injected failure or a GPU without the memory
   * for it fails it; at the end it is loaded (`core/worker.py`, `launch_builtin_model`, `wait_for_load`).
   */
  #loadReplica(model: Model, replica: Replica): Promise<void> {
    const index = this.pendingFailures.findIndex((f) => f.modelUid === undefined || f.modelUid === model.uid);
    const injected = index >= 0 ? this.pendingFailures.splice(index, 1)[0] : undefined;
    const loadMs = this.settings.modelLoadMs;
    return new Promise((resolve, reject) => {
      const later = (fraction: number, run: () => void) => {
        const timer = setTimeout(() => {
          this.#scaleTimers.delete(timer);
          run();
        }, Math.floor(loadMs * fraction));
        this.#scaleTimers.add(timer);
      };
      let failed = false;
      later(0.5, () => {
        if (model.registered && !model.recovering) model.status = 'READY';
      });
      later(0.75, () => {
        const failure = injected ? launchFailure(injected.kind, model) : this.#outOfMemory(model, [replica]);
        if (!failure) return;
        failed = true;
        this.#report([replica], 'INFO', 'Terminate model');
        reject(failure);
      });
      later(1, () => {
        if (failed) return;
        if (model.registered) resolve();
        else reject(runtimeError(`Model ${model.uid} was removed while its replica ${replica.uid} loaded`));
      });
    });
  }

  /**
   * `DELETE /v1/models/{uid}/replicas/{replica_id}` (`api/restful_api.py`, `terminate_model_replica`;
   * `core/supervisor.py`, `terminate_model_replica`; since before 3.0): the worker tears the replica
   * down first, the instance TERMINATING meanwhile, while the replica stays in the rotation
   * (requests routed to it answer 500 "is in stopping state", those it was serving fail); then it
   * leaves the rotation and its status is dropped. The answer is the number of replicas left; at
   * zero the model is gone (its instance TERMINATED, dropped from the lists), as if terminated.
   */
  deleteReplica(uid: string, replicaId: number): Promise<number> {
    return this.#serialized(uid, async () => {
      const model = this.models.get(uid);
      if (!model || !model.registered) throw valueError(`Model not found in the model list, uid: ${uid}`);
      const replica = model.replicas.find((r) => r.active && r.id === replicaId);
      if (!replica) throw valueError(`Replica not found in the model list, uid: ${uid}, replica_id: ${replicaId}`);
      if (!replica.routed) throw valueError(`Model not found in the model list, uid: ${replica.uid}`);
      // core/worker.py, terminate_model: a replica being relaunched after a crash holds its launch guard.
      if (model.recovering && model.launching) throw valueError(`${replica.uid} is launching`);
      const reason = `Remote server unixsocket:///${replica.subpoolAddress} closed`;
      model.status = 'TERMINATING';
      replica.status = 'TERMINATING';
      replica.modelState = 'stopping';
      this.#report([replica], 'INFO', 'Terminate model');
      for (const generation of [...model.generations]) if (replica.serving.has(generation.res)) generation.fail(reason);
      failQueue(replica, reason);
      if (this.settings.terminateMs > 0) await new Promise((resolve) => setTimeout(resolve, this.settings.terminateMs));
      if (replica.worker) for (const index of replica.gpuIdx) replica.worker.gpus[index]?.delete(replica.uid);
      replica.status = 'TERMINATED';
      replica.routed = false;
      replica.active = false;
      model.replicas = model.replicas.filter((r) => r !== replica);
      model.nextReplica = 0;
      const remaining = model.replicas.length;
      this.log?.info({ model_uid: uid, replica_model_uid: replica.uid, remaining }, 'cluster simulator: replica deleted');
      if (remaining > 0) {
        model.status = 'READY';
        model.replicaCount = remaining;
        return remaining;
      }
      model.status = 'TERMINATED';
      this.#remove(model, reason);
      this.terminations.push({ modelUid: uid, at: new Date() });
      return 0;
    });
  }

  /**
   * A scale-up's config resolved on the cluster (`core/supervisor.py`, `_resolve_replica_config`):
   * the worker by its exact address, GPU indexes it has, and with exclusive GPUs ones no model holds.
   */
  #resolvePlacement(device: DeviceConfig): { worker: WorkerState; gpuIdx: number[] | null; nGpu: unknown } {
    const worker = this.workers.find((w) => w.address === device.workerIp);
    if (!worker) {
      throw valueError(`replica_config[0].worker_ip '${device.workerIp}' is not in the cluster. Registered workers: ${pyList(this.workers.map((w) => w.address))}`);
    }
    const gpuIdx = device.gpuIdx && device.gpuIdx.length > 0 ? device.gpuIdx : null;
    if (gpuIdx) {
      const visible = worker.gpus.map((_, index) => index);
      if (gpuIdx.some((index) => index >= worker.gpus.length)) {
        throw valueError(`replica_config[0].gpu_idx ${pyList(gpuIdx)} is not visible on worker ${worker.address}; visible GPU indexes: ${pyList(visible)}`);
      }
      const occupied = gpuIdx.filter((index) => (worker.gpus[index]?.size ?? 0) > 0).sort((a, b) => a - b);
      if (!this.settings.allowMultiReplicaPerGpu && occupied.length > 0) {
        throw valueError(`replica_config GPU conflict on worker ${worker.address}: GPU indexes ${pyList(occupied)} are already occupied, and this worker disallows sharing a GPU.`);
      }
    }
    return { worker, gpuIdx, nGpu: gpuIdx && device.nGpu === 'auto' ? gpuIdx.length : device.nGpu };
  }

  /**
   * Where a scale-up goes without a config (`core/supervisor.py`, `_select_worker_for_scale_up`;
   * `core/launch_strategy.py`, `IdleFirstLaunchStrategy`): among the workers with room for the
   * GPUs (any with as many GPUs when they are shared, the default; enough idle ones otherwise), the
   * GPU set with the fewest models, ties to the lower address. Without GPUs (`n_gpu` null or 0),
   * the worker with the fewest models, and no GPU.
   */
  #selectForScaleUp(nGpu: unknown): { worker: WorkerState; gpuIdx: number[] | null } {
    let candidates = [...this.workers];
    if (candidates.length === 0) throw runtimeError('No available worker found');
    const useGpu = !(nGpu === null || (typeof nGpu === 'number' && nGpu <= 0));
    if (useGpu) {
      const requested = typeof nGpu === 'number' ? nGpu : 1;
      const feasible = candidates.filter((w) => (this.settings.allowMultiReplicaPerGpu ? w.gpus.length : idleGpus(w).length) >= requested);
      if (feasible.length === 0) {
        if (candidates.some((w) => w.gpus.length > 0) || typeof nGpu === 'number') throw runtimeError(`No worker has capacity for ${requested} GPU(s)`);
      } else {
        candidates = feasible;
      }
      let best: { worker: WorkerState; gpuIdx: number[]; score: number } | undefined;
      for (const worker of candidates) {
        const loads = worker.gpus.map((holders, index) => [holders.size, index] as const).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
        if (loads.length < requested) continue;
        const picked = loads.slice(0, requested);
        const score = picked.reduce((sum, [load]) => sum + load, 0);
        if (!best || score < best.score || (score === best.score && worker.address < best.worker.address)) {
          best = { worker, gpuIdx: picked.map(([, index]) => index), score };
        }
      }
      if (best) return { worker: best.worker, gpuIdx: best.gpuIdx };
    }
    candidates.sort((a, b) => this.#modelCount(a) - this.#modelCount(b) || a.address.localeCompare(b.address));
    return { worker: candidates[0] as WorkerState, gpuIdx: null };
  }

  /**
   * GPUs a worker picks itself for a replica placed without indexes (`core/worker.py`,
   * `allocate_devices`): the least-loaded ones when GPUs are shared, idle ones otherwise ("No
   * available slot" when too few).
   */
  #allocate(worker: WorkerState, nGpu: unknown): number[] {
    if (nGpu === null || (typeof nGpu === 'number' && nGpu <= 0)) return [];
    const count = typeof nGpu === 'number' ? nGpu : 1;
    if (!this.settings.allowMultiReplicaPerGpu) {
      const idle = idleGpus(worker);
      if (idle.length < count) throw runtimeError('No available slot found for the model');
      return idle.slice(0, count);
    }
    if (worker.gpus.length < count) throw runtimeError('No available slot found for the model');
    return worker.gpus
      .map((holders, index) => [holders.size, index] as const)
      .sort((a, b) => a[0] - b[0] || a[1] - b[1])
      .slice(0, count)
      .map(([, index]) => index)
      .sort((a, b) => a - b);
  }

  /** Runs the scale changes of one model uid one after the other (the supervisor's per-model lock). */
  #serialized<T>(uid: string, run: () => Promise<T>): Promise<T> {
    const previous = this.#locks.get(uid);
    const result = previous ? previous.then(run) : run();
    const done = result.then(
      () => undefined,
      () => undefined,
    );
    this.#locks.set(uid, done);
    void done.then(() => {
      if (this.#locks.get(uid) === done) this.#locks.delete(uid);
    });
    return result;
  }

  // ------------------------------------------------------------------ crash and auto-recovery

  /**
   * The model's process dies. A launching model fails. A serving one is recreated by its worker
   * while its recover budget lasts (`core/worker.py`, `recover_sub_pool`, `recover_model`;
   * XINFERENCE_MODEL_ACTOR_AUTO_RECOVER_LIMIT, unbounded by default): the replica goes TERMINATING
   * ("stopping"), the instance TERMINATING then ERROR, then the model loads again: the instance is
   * READY, then the replica READY. While the dead replica is torn down, inference answers 500 "is in
   * stopping state"; while it loads again, 503, and a DELETE 400 "… is launching" (the launch guard);
   * describe answers 400 throughout (`worker.py`, `get_model`, `describe_model`, `terminate_model`).
   * Past the budget the replica is marked dead (`core/supervisor.py`, `mark_replica_dead`): the
   * instance becomes TERMINATED and is dropped from the list (`core/status_guard.py`), the uid is
   * forgotten (a DELETE answers 400 "not found") and the GPUs are freed. In-flight requests fail either way.
   */
  crash(uid: string, options: { recover?: boolean; message?: string } = {}): boolean {
    const model = this.models.get(uid);
    if (!model || !model.registered) return false;
    const reason = options.message ?? `Remote server unixsocket:///${model.replicas[0]?.subpoolAddress ?? uid} closed`;
    this.log?.warn({ model_uid: uid, reason }, 'cluster simulator: model crashed');
    // A replica a scale-up is still loading runs in a process of its own: the crash is the others'.
    const active = model.replicas.filter((replica) => replica.active);
    if (active.some((replica) => !replica.routed)) {
      // After the engine's load() returned, the death surfaces in wait_for_load, whose cleanup terminates the replicas.
      if (!model.launching) this.#report(active, 'INFO', 'Terminate model');
      this.#failLaunch(model, runtimeError(reason));
      return true;
    }
    for (const generation of [...model.generations]) generation.fail(reason);
    for (const replica of active) failQueue(replica, reason);
    this.#clearTimers(model);
    model.status = 'TERMINATING';
    for (const replica of active) {
      replica.status = 'TERMINATING';
      replica.modelState = 'stopping';
    }
    const recover = options.recover ?? (model.recoveriesLeft === null || model.recoveriesLeft > 0);
    if (!recover) {
      this.#after(model, 1, () => {
        model.status = 'TERMINATED';
        this.#remove(model, reason);
      });
      return true;
    }
    model.recovering = true;
    // core/worker.py, recover_sub_pool: "Recreate model" is reported only under a bounded budget.
    const bounded = model.recoveriesLeft !== null;
    if (model.recoveriesLeft !== null) model.recoveriesLeft--;
    // Recreating the model is a new load, of the load time configured now, after the teardown.
    const recoveryMs = this.settings.modelLoadMs;
    const teardownMs = Math.max(1, Math.floor(recoveryMs * 0.2));
    this.#after(model, teardownMs, () => {
      model.status = 'ERROR';
      model.launching = true;
      for (const replica of active) replica.modelState = 'loading';
      if (bounded) this.#report(active, 'WARNING', 'Recreate model');
      // recover_model relaunches through launch_builtin_model, which reports the launch.
      this.#report(active, 'INFO', 'Launch model');
    });
    this.#after(model, Math.max(teardownMs + 1, Math.floor(recoveryMs * 0.5)), () => {
      model.status = 'READY';
    });
    this.#after(model, Math.max(teardownMs + 2, recoveryMs), () => {
      model.launching = false;
      model.recovering = false;
      for (const replica of active) {
        replica.status = 'READY';
        replica.modelState = 'ready';
      }
      this.log?.info({ model_uid: uid }, 'cluster simulator: model recovered');
    });
    return true;
  }

  // ------------------------------------------------------------------ reads

  /** `GET /v1/models/{uid}` (`core/supervisor.py`, `describe_model`; 503 `ModelNotReadyError` until routed). */
  describable(uid: string): { model: Model; replica: Replica } {
    const model = this.models.get(uid);
    if (!model || !model.registered) throw valueError(`Model not found in the model list, uid: ${uid}`);
    const replica = model.replicas.find((r) => r.active);
    if (!replica) throw valueError(`Model not found in the model list, uid: ${uid}`);
    // `worker.py`, `describe_model`: the dead replica's spec was popped; it returns with the relaunch.
    if (model.recovering) throw valueError(`Model not found in the model list, uid: ${replica.uid}`);
    if (!replica.routed) throw notReady(`Model ${uid} is launching, not yet ready for inference`);
    if (replica.modelState !== 'ready') throw notReady(`Model ${replica.uid} is loading`);
    return { model, replica };
  }

  /**
   * The model an inference request names, and a slot on the replica that serves it, held until
   * `res` closes (`api/utils.py`, `require_model`; `core/supervisor.py`, `get_model`;
   * `core/worker.py`, `get_model`): unknown → 404 listing the uids; launching → 503; recovering →
   * 503 (the worker reports it loading again). Requests take the active replicas in turn (round
   * robin, whatever their load), a replica being deleted included until it is gone; a replica at
   * its concurrency limit queues the request (`ClusterSettings.replicaConcurrency`).
   */
  async serving(uid: unknown, res: ServerResponse): Promise<Model> {
    const model = typeof uid === 'string' ? this.models.get(uid) : undefined;
    if (!model || !model.registered) {
      const uids = [...this.models.values()].filter((m) => m.registered).map((m) => m.uid);
      throw this.#reportedError(uid, new SimulatorError(404, `Model not found in the model list, uid: ${String(uid)}. Available model uids: ${pyList(uids)}`));
    }
    const active = model.replicas.filter((r) => r.active);
    const replica = active[model.nextReplica++ % Math.max(1, active.length)];
    if (!replica) throw new SimulatorError(404, `Model not found in the model list, uid: ${model.uid}`);
    if (!replica.routed) throw notReady(`Model ${model.uid} is launching, not yet ready for inference`);
    // `worker.py`, `get_model`: a replica being torn down is a RuntimeError (500); one loading, 503.
    if (replica.modelState === 'stopping') throw this.#reportedError(uid, new SimulatorError(500, `Model ${replica.uid} is in stopping state`));
    if (replica.modelState !== 'ready') throw notReady(`Model ${replica.uid} is loading`);
    replica.requests++;
    const limit = this.settings.replicaConcurrency;
    if (limit === null || replica.serving.size < limit) hold(replica, res, () => this.#admitQueued(replica));
    else await this.#queue(replica, res);
    return model;
  }

  /** Waits for a slot on the replica; fails if the replica dies first, and leaves if the client does. */
  #queue(replica: Replica, res: ServerResponse): Promise<void> {
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        res,
        admit: () => {
          hold(replica, res, () => this.#admitQueued(replica));
          resolve();
        },
        fail: reject,
      };
      replica.queue.push(waiter);
      res.once('close', () => {
        const index = replica.queue.indexOf(waiter);
        if (index !== -1) replica.queue.splice(index, 1);
      });
    });
  }

  /** Admits queued requests while the replica has free slots. */
  #admitQueued(replica: Replica): void {
    const limit = this.settings.replicaConcurrency;
    while (replica.queue.length > 0 && (limit === null || replica.serving.size < limit)) replica.queue.shift()?.admit();
  }

  /** Changes the per-replica concurrency limit; a higher one (or none) admits the requests waiting. */
  setReplicaConcurrency(limit: number | null): void {
    this.settings.replicaConcurrency = limit;
    for (const model of this.models.values()) for (const replica of model.replicas) this.#admitQueued(replica);
  }

  /** `GET /v1/models/instances` (`core/status_guard.py`: TERMINATED instances are dropped). */
  instances(uid: string | null, name: string | null): Record<string, unknown>[] {
    return [...this.models.values(), ...this.orphans]
      .filter((model) => !model.dropped && (uid !== null ? model.uid === uid : name === null || model.name === name))
      .sort((a, b) => (a.uid < b.uid ? -1 : a.uid > b.uid ? 1 : 0))
      .map((model) => ({
        model_name: model.name,
        model_uid: model.uid,
        model_version: null,
        model_ability: model.abilities,
        replica: model.replicaCount,
        status: model.status,
        instance_created_ts: model.createdTs,
        n_worker: 1,
        replica_statuses: model.replicas.map((replica) => ({
          replica_id: replica.id,
          replica_model_uid: replica.uid,
          worker_address: replica.worker?.address ?? '',
          status: replica.status,
          model_state: replica.modelState,
          created_ts: replica.createdTs,
          error_message: replica.errorMessage,
          replica_uid: replica.label,
          gpu_idx: replica.pinnedGpuIdx,
        })),
      }));
  }

  /** `GET /v1/models/{uid}/progress` (`core/supervisor.py`, `get_launch_builtin_model_progress_details`). */
  progress(uid: string): Record<string, unknown> {
    const model = this.models.get(uid);
    if (!model || !model.registered) return { progress: 0.0, stage: 'pending', download_files: [], replicas: [] };
    const { progress, stage } = loadStage(model);
    return {
      progress,
      stage,
      download_files: [],
      replicas: model.replicas.map((replica) => ({
        replica_id: replica.id,
        replica_model_uid: replica.uid,
        progress,
        stage,
        info: '',
        updated_at: Date.now() / 1000,
        download_files: [],
      })),
    };
  }

  /**
   * Models a worker lists (`GET /v1/models`, `/v1/workers`): registered and loaded. A failed
   * scale-up leaves the instance ERROR while the model serves on (see `addReplica`): still listed.
   */
  listed(model: Model): boolean {
    const loaded = model.status === 'READY' || (model.status === 'ERROR' && !model.recovering && !model.launching);
    return model.registered && loaded && model.replicas.some((r) => r.active);
  }

  /** Uids of the models that serve: every active replica ready (a replica a scale-up is loading is not active yet). */
  running(): string[] {
    return [...this.models.values()]
      .filter((model) => {
        const active = model.replicas.filter((r) => r.active);
        return model.registered && active.length > 0 && active.every((r) => r.routed && r.modelState === 'ready');
      })
      .map((model) => model.uid)
      .sort();
  }

  gpus(): SimulatedGpu[] {
    return this.workers.flatMap((worker) =>
      worker.gpus.map((holders, index) => ({
        worker: worker.name,
        address: worker.address,
        gpuName: worker.gpuName,
        index,
        memoryGb: worker.memoryGb,
        heldBy: holders.values().next().value ?? null,
        holders: [...holders],
      })),
    );
  }

  /** Memory in use on a worker's GPU, in GB. */
  usedMemoryGb(worker: WorkerState, index: number): number {
    return [...(worker.gpus[index] ?? [])].reduce((sum, uid) => sum + (this.#replicaByUid(uid)?.memoryGb ?? 0), 0);
  }

  failNextLaunch(kind: LaunchFailureKind, modelUid?: string): void {
    if (kind !== 'error' && kind !== 'oom') throw new Error(`unknown launch failure kind: ${String(kind)}`);
    this.pendingFailures.push({ kind, modelUid });
  }

  stop(): void {
    for (const model of [...this.models.values(), ...this.orphans]) this.#clearTimers(model);
    for (const timer of this.#scaleTimers) clearTimeout(timer);
    this.#scaleTimers.clear();
  }

  // ------------------------------------------------------------------ helpers

  /** Each replica's event, under its model's uid (`events.ts` says who reports what). */
  #report(replicas: readonly Replica[], type: 'INFO' | 'WARNING' | 'ERROR', content: string): void {
    for (const replica of replicas) this.events.report(replica.uid.replace(/-rep\d+$/, ''), type, content);
  }

  /** An inference error as the REST layer reports it (`api/utils.py`, `require_model`), under the uid the request named. */
  #reportedError(uid: unknown, error: SimulatorError): SimulatorError {
    if (typeof uid === 'string') this.events.report(uid, 'ERROR', error.message);
    return error;
  }

  #after(model: Model, ms: number, run: () => void): void {
    const timer = setTimeout(() => {
      model.timers.delete(timer);
      run();
    }, ms);
    model.timers.add(timer);
  }

  #clearTimers(model: Model): void {
    for (const timer of model.timers) clearTimeout(timer);
    model.timers.clear();
  }

  #releaseGpus(model: Model): void {
    for (const replica of model.replicas) {
      if (replica.worker) for (const index of replica.gpuIdx) replica.worker.gpus[index]?.delete(replica.uid);
    }
  }
}

/** Gives the answer `res` a slot on the replica until it closes; `freed` runs when it does. */
function hold(replica: Replica, res: ServerResponse, freed: () => void): void {
  if (res.closed) return;
  replica.serving.add(res);
  res.once('close', () => {
    replica.serving.delete(res);
    freed();
  });
}

/** Fails the requests waiting for a slot on a replica that died or was deleted. */
function failQueue(replica: Replica, message: string): void {
  for (const waiter of replica.queue.splice(0)) waiter.fail(new SimulatorError(500, message));
}

function settle(model: Model, error: SimulatorError | undefined): void {
  const waiters = model.waiters;
  model.waiters = [];
  for (const waiter of waiters) waiter(error);
}

function idleGpus(worker: WorkerState): number[] {
  const idle: number[] = [];
  worker.gpus.forEach((holders, index) => holders.size === 0 && idle.push(index));
  return idle;
}

function isVllm(model: Model): boolean {
  return model.type === 'LLM' && (model.engine ?? '').toLowerCase() === 'vllm';
}

/**
 * GB a replica takes on each of its GPUs: vLLM takes 90% of every GPU it runs on (its default
 * `gpu_memory_utilization`); others about their weights.
 */
function memoryPerGpu(model: Model, worker: WorkerState, gpuCount: number): number {
  if (gpuCount === 0) return 0;
  if (isVllm(model)) return worker.memoryGb * 0.9;
  const size = typeof model.sizeInBillions === 'number' ? model.sizeInBillions : Number(String(model.sizeInBillions ?? '').replace('_', '.'));
  if (!Number.isFinite(size) || size <= 0) return 2;
  const quantization = (model.quantization ?? 'none').toLowerCase();
  const bytes = /int4|4-bit|q4|awq/.test(quantization) ? 0.5 : /int8|8-bit|q8/.test(quantization) ? 1 : /q5/.test(quantization) ? 0.625 : 2;
  return (size * bytes * 1.2 + 1) / gpuCount;
}

function abilities(model: Model): string[] {
  switch (model.type) {
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

/** Progress of a launch: the first half is the download (0 to 0.8), the second the load (0.8 to 1). */
function loadStage(model: Model): { progress: number; stage: 'downloading' | 'loading' } {
  if (model.replicas.every((r) => r.routed)) return { progress: 1, stage: 'loading' };
  const fraction = model.loadMs <= 0 ? 1 : Math.min(1, (Date.now() - model.startedAt) / model.loadMs);
  return fraction < 0.5 ? { progress: fraction * 1.6, stage: 'downloading' } : { progress: 0.8 + (fraction - 0.5) * 0.4, stage: 'loading' };
}

function validateReplica(value: unknown): number {
  if (typeof value === 'boolean') throw valueError('Invalid input. The `replica` field must be an integer, got a boolean.');
  if (typeof value === 'number' && !Number.isInteger(value)) throw valueError('Invalid input. The `replica` field must be an integer, got a float.');
  const replica = typeof value === 'number' ? value : typeof value === 'string' && /^\s*[+-]?\d+\s*$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(replica)) throw valueError('Invalid input. The `replica` field must be a valid integer.');
  if (replica < 1) throw valueError('Invalid input. The `replica` field must be at least 1.');
  return replica;
}

/** Whether the version played is at least major.minor (an unreadable version counts as the newest). */
export function versionAtLeast(version: string, major: number, minor: number): boolean {
  const match = /^(\d+)\.(\d+)/.exec(version);
  if (!match) return true;
  const [actualMajor, actualMinor] = [Number(match[1]), Number(match[2])];
  return actualMajor > major || (actualMajor === major && actualMinor >= minor);
}
