import { setTimeout as delay } from 'node:timers/promises';
import type { Knex } from 'knex';
import { EngineError } from '../adapters/xinference.ts';
import { specsOf } from '../catalog/catalog.repository.ts';
import type { ClustersService } from '../clusters/clusters.service.ts';
import { bookGpus, hostedAllocation, lockGpuLedger, placementOptions, releaseGpus } from '../clusters/gpu-ledger.ts';
import { toCandidate } from '../deployments/deployments.repository.ts';
import { requiredGpuMemoryGb, selectPlacement } from '../deployments/instance-selection.ts';
import { resolveLaunch } from '../deployments/launch-spec.ts';
import { activeHostedClusters, hostedCatalogModels, placeHostedEndpoint, saveHostedEndpoint, workerOf } from './hosted-models.repository.ts';

/** The engine's id of a hosted model on a hosted cluster: fixed by the name, so a launch again is recognised. */
export function hostedModelUid(modelName: string): string {
  return `hosted-${modelName}`;
}

/** How one hosted model's launch on one cluster ended. */
export interface HostedLaunchOutcome {
  model: string;
  cluster: string;
  state: 'running' | 'failed' | 'launching';
  reason?: string;
}

/** Where a hosted model's launch runs: its instance's engine worker and the GPUs booked there. */
interface HostedPlacement {
  workerAddress: string;
  gpuCount: number;
}

/**
 * Launches the catalog's hosted models (all enabled, or those named) on every active hosted cluster
 * in their default launch combination, and waits until each serves or `timeoutMs` passes; each
 * launch is recorded in `hosted_model_endpoints`. A launch books its GPUs in the GPU ledger on the
 * cheapest worker with room and is pinned there, so a cluster registered both as dedicated and as
 * hosted never offers a deployment a hosted model's GPUs (docs/engine.md, Hosted models).
 */
export async function launchHostedModels(
  deps: { db: Knex; clusters: ClustersService },
  options: { models?: readonly string[]; timeoutMs?: number; pollMs?: number } = {},
): Promise<HostedLaunchOutcome[]> {
  const { db, clusters } = deps;
  const models = await hostedCatalogModels(db, options.models);
  const unknown = (options.models ?? []).filter((name) => !models.some((m) => m.model_name === name));
  if (unknown.length) throw new Error(`not enabled hosted models of the catalog: ${unknown.join(', ')}`);
  const targets = await activeHostedClusters(db);
  if (!targets.length) throw new Error('no active hosted cluster: register one with `cluster register … --hosted`');
  for (const cluster of targets) await clusters.sync(cluster.id);
  const specs = await specsOf(db, models.map((m) => m.id));
  const deadline = Date.now() + (options.timeoutMs ?? 600_000);
  const launches = targets.flatMap((cluster) => models.map((model) => ({ cluster, model })));
  return Promise.all(
    launches.map(async ({ cluster, model }): Promise<HostedLaunchOutcome> => {
      const base = { model: model.model_name, cluster: cluster.name };
      const uid = hostedModelUid(model.model_name);
      const endpoint = { model_name: model.model_name, cluster_id: cluster.id, engine_model_uid: uid };
      const failed = async (reason: string): Promise<HostedLaunchOutcome> => {
        await db.transaction(async (trx) => {
          const id = await saveHostedEndpoint(trx, { ...endpoint, state: 'failed', state_reason: reason });
          await releaseGpus(trx, { hostedEndpointId: id });
        });
        return { ...base, state: 'failed', reason };
      };
      const resolved = resolveLaunch(
        specs.filter((s) => s.deployable_model_id === model.id).map((s) => ({ ...s, modelFormat: s.model_format, modelSizeInBillions: Number(s.model_size_in_billions), modelEngine: s.model_engine })),
        {},
      );
      if (!resolved.ok) return { ...base, state: 'failed', reason: resolved.reason };
      const placed = await placeHostedModel(db, { ...endpoint, requiredGb: requiredGpuMemoryGb(resolved.launch.modelSizeInBillions, resolved.launch.quantization) });
      if (!placed.ok) return failed(placed.reason);
      const client = await clusters.clientOf(cluster.id);
      try {
        await client.launch({ modelUid: uid, modelName: model.model_name, modelType: model.model_type, ...resolved.launch, ...placed.placement });
        for (;;) {
          const state = await client.state(uid);
          if (state.state === 'ready') {
            await saveHostedEndpoint(db, { ...endpoint, state: 'running', state_reason: null });
            return { ...base, state: 'running' };
          }
          if (state.state === 'error' || state.state === 'missing') return failed(state.state === 'error' ? state.message : 'the engine no longer knows the model');
          if (Date.now() > deadline) return { ...base, state: 'launching', reason: 'still loading; run `hosted launch` again to wait for it' };
          await delay(options.pollMs ?? 1_000);
        }
      } catch (error) {
        if (!(error instanceof EngineError)) throw error;
        return failed(error.message);
      }
    }),
  );
}

/**
 * Records the launch as `launching` and books its GPUs, under the ledger's lock: the cheapest
 * worker of its cluster with room for `requiredGb` (a launch that already holds GPUs keeps them).
 */
async function placeHostedModel(
  db: Knex,
  launch: { model_name: string; cluster_id: string; engine_model_uid: string; requiredGb: number },
): Promise<{ ok: true; placement: HostedPlacement } | { ok: false; reason: string }> {
  const { requiredGb, ...endpoint } = launch;
  return db.transaction(async (trx) => {
    await lockGpuLedger(trx);
    const id = await saveHostedEndpoint(trx, { ...endpoint, state: 'launching', state_reason: null });
    const held = await hostedAllocation(trx, id);
    if (held) return { ok: true, placement: { workerAddress: await workerOf(trx, held.instance_id), gpuCount: held.gpu_count } };
    const selection = selectPlacement((await placementOptions(trx, { clusterId: endpoint.cluster_id })).map(toCandidate), requiredGb);
    if (!selection.ok) return { ok: false, reason: selection.reason };
    const { instanceId, gpuCount } = selection.placement;
    await bookGpus(trx, { hostedEndpointId: id }, instanceId, gpuCount);
    await placeHostedEndpoint(trx, id, instanceId);
    return { ok: true, placement: { workerAddress: await workerOf(trx, instanceId), gpuCount } };
  });
}
