import type { IncomingMessage, ServerResponse } from 'node:http';
import type { SimulatedAuth } from './auth.ts';
import { versionAtLeast, type Model, type SimulatedCluster } from './cluster.ts';
import type { InferenceRoutes } from './generation.ts';
import { isRecord, parseBool, readBody, readJsonObject, sendJson } from './http.ts';
import { readReplicaConfig } from './replica-config.ts';

/**
 * The simulator's HTTP surface: Xinference's routes with the scopes they require
 * (`xinference/api/routers/models.py`, `admin.py`, `llm.py`, `embeddings.py`, `rerank.py`,
 * `images.py`, `audio.py`; the auth routes of `api/oauth2/advanced/routes.py`), and the
 * simulator's own controls under `/_simulator/`. A route that does not exist is 404 before any
 * authentication, as FastAPI routes first; a path that exists for other methods only is 405 (Starlette's
 * router, `starlette/routing.py`: a partial match answers "Method Not Allowed" with `Allow`).
 */

const GIB = 1024 ** 3;

interface Context {
  req: IncomingMessage;
  res: ServerResponse;
  query: URLSearchParams;
  uid: string;
  /** The path's other parameters, after the model uid. */
  params: string[];
}

interface Route {
  method: string;
  /** A fixed path, or a pattern whose first group is the model uid. */
  path: string | RegExp;
  /** How requests are counted: `METHOD /route/{param}`. */
  name: string;
  /** The scopes the route requires; null for the routes Xinference leaves open. */
  scopes: string[] | null;
  /** Exists only while authentication is on. */
  authOnly?: boolean;
  /** The Xinference version (major, minor) that added the route; older versions do not have it. */
  since?: [number, number];
  handle(context: Context): Promise<void> | void;
}

export interface RouterDeps {
  cluster: SimulatedCluster;
  inference: InferenceRoutes;
  auth: SimulatedAuth | undefined;
  startedAt: number;
  supervisorAddress: () => string;
  embeddingDimensions: number;
  controls: (req: IncomingMessage, res: ServerResponse, path: string) => Promise<void>;
}

export function createRouter(deps: RouterDeps) {
  const { cluster, inference, auth } = deps;
  const requests: Record<string, number> = {};
  const count = (route: string) => {
    requests[route] = (requests[route] ?? 0) + 1;
  };

  const uidPath = (tail: string) => new RegExp(`^/v1/models/([^/]+)${tail}$`);
  const routes: Route[] = [
    { method: 'POST', path: '/v1/chat/completions', name: 'POST /v1/chat/completions', scopes: ['models:read'], handle: ({ req, res }) => inference.chatCompletions(req, res) },
    { method: 'POST', path: '/v1/completions', name: 'POST /v1/completions', scopes: ['models:read'], handle: ({ req, res }) => inference.completions(req, res) },
    { method: 'POST', path: '/v1/embeddings', name: 'POST /v1/embeddings', scopes: ['models:read'], handle: ({ req, res }) => inference.embeddings(req, res) },
    { method: 'POST', path: '/v1/rerank', name: 'POST /v1/rerank', scopes: ['models:read'], handle: ({ req, res }) => inference.rerank(req, res) },
    { method: 'POST', path: '/v1/images/generations', name: 'POST /v1/images/generations', scopes: ['models:read'], handle: ({ req, res }) => inference.images(req, res) },
    { method: 'POST', path: '/v1/audio/transcriptions', name: 'POST /v1/audio/transcriptions', scopes: ['models:read'], handle: ({ req, res }) => inference.transcriptions(req, res) },
    { method: 'GET', path: '/v1/models', name: 'GET /v1/models', scopes: ['models:list'], handle: ({ res }) => listModels(res) },
    { method: 'POST', path: '/v1/models', name: 'POST /v1/models', scopes: ['models:write'], handle: launch },
    {
      method: 'GET',
      path: '/v1/models/instances',
      name: 'GET /v1/models/instances',
      scopes: ['models:list'],
      handle: ({ res, query }) => sendJson(res, 200, cluster.instances(query.get('model_uid'), query.get('model_name'))),
    },
    { method: 'GET', path: uidPath(''), name: 'GET /v1/models/{model_uid}', scopes: ['models:list'], handle: ({ res, uid }) => describeModel(res, uid) },
    {
      method: 'DELETE',
      path: uidPath(''),
      name: 'DELETE /v1/models/{model_uid}',
      scopes: ['models:write'],
      handle: async ({ res, uid }) => {
        await cluster.terminate(uid);
        sendJson(res, 200, null);
      },
    },
    // The replica API (`api/routers/models.py`): GET and DELETE since before 3.0, POST since 3.2.0.
    {
      method: 'GET',
      path: uidPath('/replicas'),
      name: 'GET /v1/models/{model_uid}/replicas',
      scopes: ['models:list'],
      handle: ({ res, uid }) => sendJson(res, 200, cluster.replicaStatuses(uid)),
    },
    { method: 'POST', path: uidPath('/replicas'), name: 'POST /v1/models/{model_uid}/replicas', scopes: ['models:write'], since: [3, 2], handle: addReplica },
    {
      method: 'DELETE',
      path: uidPath('/replicas/([^/]+)'),
      name: 'DELETE /v1/models/{model_uid}/replicas/{replica_id}',
      scopes: ['models:write'],
      handle: deleteReplica,
    },
    // `api/routers/models.py`: the model's events (`events.ts`), under `models:read` as progress.
    { method: 'GET', path: uidPath('/events'), name: 'GET /v1/models/{model_uid}/events', scopes: ['models:read'], handle: ({ res, uid }) => sendJson(res, 200, cluster.events.of(uid)) },
    { method: 'GET', path: uidPath('/progress'), name: 'GET /v1/models/{model_uid}/progress', scopes: ['models:read'], handle: ({ res, uid }) => sendJson(res, 200, cluster.progress(uid)) },
    {
      method: 'POST',
      path: uidPath('/cancel'),
      name: 'POST /v1/models/{model_uid}/cancel',
      scopes: ['models:write'],
      handle: ({ req, res, uid }) => {
        req.resume();
        cluster.cancel(uid);
        sendJson(res, 200, null);
      },
    },
    { method: 'GET', path: '/status', name: 'GET /status', scopes: null, handle: ({ res }) => clusterStatus(res) },
    { method: 'GET', path: '/v1/address', name: 'GET /v1/address', scopes: null, handle: ({ res }) => sendJson(res, 200, deps.supervisorAddress()) },
    { method: 'GET', path: '/v1/cluster/auth', name: 'GET /v1/cluster/auth', scopes: null, handle: ({ res }) => sendJson(res, 200, { auth: Boolean(auth) }) },
    { method: 'GET', path: '/v1/cluster/info', name: 'GET /v1/cluster/info', scopes: ['admin'], handle: ({ res, query }) => clusterInfo(res, query) },
    {
      method: 'GET',
      path: '/v1/cluster/devices',
      name: 'GET /v1/cluster/devices',
      scopes: ['models:list'],
      handle: ({ res }) => sendJson(res, 200, Math.max(0, ...cluster.workers.map((w) => w.gpus.length))),
    },
    {
      method: 'GET',
      path: '/v1/cluster/version',
      name: 'GET /v1/cluster/version',
      scopes: ['admin'],
      handle: ({ res }) => sendJson(res, 200, { version: cluster.settings.version, 'full-revisionid': null }),
    },
    { method: 'GET', path: '/v1/workers', name: 'GET /v1/workers', scopes: ['admin'], handle: ({ res }) => workersInfo(res) },
    { method: 'GET', path: '/v1/supervisor', name: 'GET /v1/supervisor', scopes: ['admin'], handle: ({ res }) => sendJson(res, 200, { supervisor_ip: deps.supervisorAddress() }) },
    {
      method: 'POST',
      path: '/token',
      name: 'POST /token',
      scopes: null,
      authOnly: true,
      handle: async ({ req, res }) => {
        const body = await readJsonObject(req, res, true);
        if (body) sendJson(res, 200, (auth as SimulatedAuth).login(body.username, body.password));
      },
    },
    {
      method: 'POST',
      path: '/v1/auth/refresh',
      name: 'POST /v1/auth/refresh',
      scopes: null,
      authOnly: true,
      handle: async ({ req, res }) => {
        const body = await readJsonObject(req, res, true);
        if (body) sendJson(res, 200, (auth as SimulatedAuth).refresh(body.refresh_token));
      },
    },
    {
      method: 'POST',
      path: '/v1/auth/logout',
      name: 'POST /v1/auth/logout',
      scopes: null,
      authOnly: true,
      handle: async ({ req, res }) => {
        const body = await readJsonObject(req, res, true);
        if (!body) return;
        (auth as SimulatedAuth).logout(body.refresh_token);
        sendJson(res, 200, { ok: true });
      },
    },
  ];

  async function launch({ req, res, query }: Context): Promise<void> {
    const waitReadyRaw = query.get('wait_ready');
    const waitReady = waitReadyRaw === null ? true : parseBool(waitReadyRaw);
    if (waitReady === undefined) {
      req.resume();
      return sendJson(res, 422, {
        detail: [{ type: 'bool_parsing', loc: ['query', 'wait_ready'], msg: 'Input should be a valid boolean, unable to interpret input', input: waitReadyRaw }],
      });
    }
    const body = await readJsonObject(req, res);
    if (!body) return;
    sendJson(res, 200, { model_uid: await cluster.launch(body, waitReady) });
  }

  /**
   * `api/restful_api.py`, `add_model_replica`: the body is an optional JSON object (FastAPI's
   * `payload: Optional[dict]`: none or null is no config, anything but an object 422), of which
   * only `replica_config` is read, checked before the model is looked up.
   */
  async function addReplica({ req, res, uid }: Context): Promise<void> {
    const raw = await readBody(req);
    let payload: unknown = null;
    if (raw.length > 0) {
      try {
        payload = JSON.parse(raw.toString('utf8'));
      } catch (error) {
        const detail = [{ type: 'json_invalid', loc: ['body', 0], msg: 'JSON decode error', input: {}, ctx: { error: (error as Error).message } }];
        return sendJson(res, 422, { detail });
      }
    }
    if (payload !== null && !isRecord(payload)) {
      return sendJson(res, 422, { detail: [{ type: 'dict_type', loc: ['body'], msg: 'Input should be a valid dictionary', input: payload }] });
    }
    const config = readReplicaConfig(payload?.replica_config);
    sendJson(res, 200, await cluster.addReplica(uid, config));
  }

  /** `api/restful_api.py`, `terminate_model_replica`: `replica_id` is an int path parameter (FastAPI answers 422 otherwise). */
  async function deleteReplica({ req, res, uid, params }: Context): Promise<void> {
    req.resume();
    const raw = decodeURIComponent(params[0] ?? '');
    if (!/^\s*[+-]?\d+\s*$/.test(raw)) {
      const detail = [{ type: 'int_parsing', loc: ['path', 'replica_id'], msg: 'Input should be a valid integer, unable to parse string as an integer', input: raw }];
      return sendJson(res, 422, { detail });
    }
    sendJson(res, 200, { remaining_replicas: await cluster.deleteReplica(uid, Number(raw)) });
  }

  function describeModel(res: ServerResponse, uid: string): void {
    const { model, replica } = cluster.describable(uid);
    sendJson(res, 200, describe(model, replica));
  }

  /** The model description a worker reports (`to_description()` of the family, engine and replica count). */
  function describe(model: Model, replica: { subpoolAddress: string; gpuIdx: number[] }): Record<string, unknown> {
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
        return { ...base, dimensions: deps.embeddingDimensions, max_tokens: 512, language: ['en'], model_revision: null, replica: model.replicaCount };
      case 'rerank':
        return { ...base, type: 'normal', max_tokens: 512, language: ['en'], model_revision: null, replica: model.replicaCount };
      case 'image':
      case 'audio':
        return { ...base, model_family: model.name, model_ability: model.abilities, model_revision: null, replica: model.replicaCount };
      default:
        return {
          ...base,
          model_lang: ['en'],
          model_ability: model.abilities,
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

  function listModels(res: ServerResponse): void {
    const data: Record<string, unknown>[] = [];
    for (const model of cluster.models.values()) {
      const replica = model.replicas.find((r) => r.active);
      if (replica && cluster.listed(model)) data.push({ id: model.uid, object: 'model', created: 0, owned_by: 'xinference', ...describe(model, replica) });
    }
    sendJson(res, 200, { object: 'list', data });
  }

  /** Each worker's GPUs with their raw NVML names (`device_utils.py`, `core/resource.py`). */
  function gpuStatus(worker: SimulatedCluster['workers'][number]): Record<string, Record<string, unknown>> {
    const status: Record<string, Record<string, unknown>> = {
      cpu: { usage: 0.05, total: 32, memory_used: 8 * GIB, memory_available: 248 * GIB, memory_total: 256 * GIB },
    };
    worker.gpus.forEach((holders, index) => {
      const total = worker.memoryGb * GIB;
      const used = Math.min(total, Math.round(cluster.usedMemoryGb(worker, index) * GIB));
      status[`gpu-${index}`] = {
        name: worker.gpuName,
        mem_total: total,
        mem_free: total - used,
        mem_used: used,
        mem_usage: used / total,
        gpu_util: holders.size === 0 ? 0 : 0.35,
      };
    });
    return status;
  }

  function clusterInfo(res: ServerResponse, query: URLSearchParams): void {
    const detailed = parseBool(query.get('detailed') ?? 'false') === true;
    const supervisor: Record<string, unknown> = { node_type: 'Supervisor', ip_address: deps.supervisorAddress(), gpu_count: 0, gpu_vram_total: 0 };
    if (detailed) {
      Object.assign(supervisor, { gpu_vram_available: 0, gpu_utilization: null, cpu_available: 7.6, cpu_count: 8, mem_used: 2 * GIB, mem_available: 30 * GIB, mem_total: 32 * GIB });
    }
    const nodes: Record<string, unknown>[] = [supervisor];
    for (const worker of cluster.workers) {
      const gpus = Object.entries(gpuStatus(worker))
        .filter(([key]) => key !== 'cpu')
        .map(([, value]) => value);
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
      cluster.workers.map((worker) => {
        const specs: Record<string, unknown> = {};
        for (const model of cluster.models.values()) {
          if (!cluster.listed(model)) continue;
          for (const replica of model.replicas) if (replica.worker === worker) specs[replica.uid] = describe(model, replica);
        }
        return { 'work-ip': worker.address, models: specs };
      }),
    );
  }

  function clusterStatus(res: ServerResponse): void {
    const statuses: Record<string, unknown> = {};
    for (const worker of cluster.workers) statuses[worker.address] = { update_time: Date.now() / 1000, failure_remaining_count: 5, status: gpuStatus(worker) };
    sendJson(res, 200, { uptime: Math.floor((Date.now() - deps.startedAt) / 1000), workers: statuses });
  }

  function authenticate(req: IncomingMessage, scopes: string[]): void {
    if (!auth) return;
    try {
      auth.authenticate(req, scopes);
    } catch (error) {
      req.resume();
      throw error;
    }
  }

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    const method = req.method ?? 'GET';

    if (path.startsWith('/_simulator/')) {
      count(`${method} ${path.startsWith('/_simulator/crash/') ? '/_simulator/crash/{model_uid}' : path}`);
      authenticate(req, ['admin']);
      return deps.controls(req, res, path);
    }
    let uid = '';
    let params: string[] = [];
    const exists = (candidate: Route) => (!candidate.authOnly || Boolean(auth)) && (!candidate.since || versionAtLeast(cluster.settings.version, ...candidate.since));
    const matches = (candidate: Route) => {
      if (typeof candidate.path === 'string') return candidate.path === path;
      const match = candidate.path.exec(path);
      if (!match || match[1] === 'instances') return false;
      uid = decodeURIComponent(match[1] ?? '');
      params = match.slice(2);
      return true;
    };
    const matched = routes.find((candidate) => candidate.method === method && exists(candidate) && matches(candidate));
    if (!matched) {
      count('unmatched');
      req.resume();
      const other = routes.find((candidate) => exists(candidate) && matches(candidate));
      if (other) return sendJson(res, 405, { detail: 'Method Not Allowed' }, { allow: other.method });
      return sendJson(res, 404, { detail: 'Not Found' });
    }
    count(matched.name);
    if (matched.scopes) authenticate(req, matched.scopes);
    await matched.handle({ req, res, query: new URLSearchParams(q === -1 ? '' : url.slice(q + 1)), uid, params });
  }

  return { route, requests };
}
