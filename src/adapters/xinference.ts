import got, { type Got, type Response } from 'got';

/** How a launch went wrong, as far as the engine said. */
export class EngineError extends Error {
  readonly kind: 'capacity' | 'rejected' | 'unavailable';

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

export type ModelState = { state: 'loading'; progress: number } | { state: 'ready' } | { state: 'error'; message: string } | { state: 'missing' };

export interface EngineWorker {
  address: string;
  gpuType: string;
  gpuCount: number;
  gpuMemoryGb: number;
}

const GIB = 1024 ** 3;

/**
 * The serving engine of a GPU cluster: a Xinference supervisor's REST API over `got`. Launches are
 * asynchronous (`wait_ready=false`) with an explicit model uid, so a retried launch is recognised;
 * readiness is polled. Works against a real supervisor and the local simulator alike.
 */
export class XinferenceClient {
  readonly #http: Got;

  constructor(endpoint: string, options: { apiKey?: string | undefined; timeoutMs?: number } = {}) {
    this.#http = got.extend({
      prefixUrl: endpoint.replace(/\/+$/, ''),
      headers: options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {},
      timeout: { request: options.timeoutMs ?? 15_000 },
      retry: { limit: 0 },
      throwHttpErrors: false,
      responseType: 'json',
    });
  }

  /** Starts loading a model under `modelUid`; one already launched under that uid counts as launched. */
  async launch(spec: LaunchSpec): Promise<'launched' | 'already-launched'> {
    const response = await this.#call(() =>
      this.#http.post('v1/models', {
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
          ...(spec.workerAddress ? { worker_ip: spec.workerAddress.split(':')[0] } : {}),
        },
      }),
    );
    if (response.statusCode === 200) return 'launched';
    const detail = detailOf(response);
    if (response.statusCode === 400 && /already in the model list/i.test(detail)) return 'already-launched';
    if (response.statusCode === 503 || /no available slot|out of memory/i.test(detail)) throw new EngineError('capacity', detail);
    if (response.statusCode >= 500) throw new EngineError('unavailable', detail);
    throw new EngineError('rejected', detail);
  }

  /** Where a model is: loading (with progress), ready, failed with the engine's message, or gone. */
  async state(modelUid: string): Promise<ModelState> {
    const response = await this.#call(() => this.#http.get('v1/models/instances', { searchParams: { model_uid: modelUid } }));
    if (response.statusCode !== 200) throw new EngineError('unavailable', detailOf(response));
    const [instance] = response.body as Array<{ status: string; replica_statuses?: Array<{ error_message?: string | null }> }>;
    if (!instance) return { state: 'missing' };
    if (instance.status === 'READY') return { state: 'ready' };
    if (instance.status === 'ERROR') {
      const message = instance.replica_statuses?.map((replica) => replica.error_message).find(Boolean) ?? 'The engine could not load the model.';
      return { state: 'error', message };
    }
    if (instance.status === 'TERMINATING' || instance.status === 'TERMINATED') return { state: 'missing' };
    return { state: 'loading', progress: await this.#progress(modelUid) };
  }

  /** Stops a model and frees its GPUs; a model that is not there is already stopped. */
  async terminate(modelUid: string): Promise<void> {
    const uid = encodeURIComponent(modelUid);
    let response = await this.#call(() => this.#http.delete(`v1/models/${uid}`));
    if (response.statusCode === 400 && /rep\d+/.test(detailOf(response))) {
      // Still launching: Xinference terminates a launch only after cancelling it.
      await this.#call(() => this.#http.post(`v1/models/${uid}/cancel`));
      response = await this.#call(() => this.#http.delete(`v1/models/${uid}`));
    }
    if (response.statusCode === 200) return;
    if (response.statusCode === 400 && /not found/i.test(detailOf(response))) return;
    throw new EngineError('unavailable', detailOf(response));
  }

  /**
   * The workers of the cluster with their GPUs, for an inventory sync. The cluster info route needs
   * the credential, so a sync also proves it; GPU model names come from the status route.
   */
  async workers(): Promise<EngineWorker[]> {
    const info = await this.#call(() => this.#http.get('v1/cluster/info', { searchParams: { detailed: 'false' } }));
    if (info.statusCode === 401 || info.statusCode === 403) throw new EngineError('rejected', `The engine refused the cluster's credential: ${detailOf(info)}`);
    if (info.statusCode !== 200) throw new EngineError('unavailable', detailOf(info));
    const response = await this.#call(() => this.#http.get('status'));
    if (response.statusCode !== 200) throw new EngineError('unavailable', detailOf(response));
    const { workers } = response.body as { workers: Record<string, { status: Record<string, { name?: string; mem_total?: number }> }> };
    return Object.entries(workers).flatMap(([address, worker]) => {
      const gpus = Object.entries(worker.status).filter(([key]) => key.startsWith('gpu-')).map(([, gpu]) => gpu);
      const first = gpus[0];
      if (!first) return [];
      return [
        {
          address,
          gpuType: (first.name ?? 'unknown').replace(/^NVIDIA\s+/i, '').trim(),
          gpuCount: gpus.length,
          gpuMemoryGb: Math.round((first.mem_total ?? 0) / GIB),
        },
      ];
    });
  }

  async #progress(modelUid: string): Promise<number> {
    const response = await this.#call(() => this.#http.get(`v1/models/${encodeURIComponent(modelUid)}/progress`));
    return response.statusCode === 200 ? Number((response.body as { progress?: number }).progress ?? 0) : 0;
  }

  async #call(request: () => Promise<Response<unknown>>): Promise<Response<unknown>> {
    try {
      return await request();
    } catch (error) {
      throw new EngineError('unavailable', `The engine did not answer: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
}

/** Xinference writes fractional sizes with an underscore: 1.5 → "1_5". */
export function engineSize(sizeInBillions: number): number | string {
  return Number.isInteger(sizeInBillions) ? sizeInBillions : String(sizeInBillions).replace('.', '_');
}

function detailOf(response: Response<unknown>): string {
  const body = response.body as { detail?: unknown } | string | null;
  if (body && typeof body === 'object' && 'detail' in body) return String(body.detail);
  return typeof body === 'string' && body ? body : `HTTP ${response.statusCode}`;
}
