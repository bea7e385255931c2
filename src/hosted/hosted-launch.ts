import { setTimeout as delay } from 'node:timers/promises';
import type { Knex } from 'knex';
import { EngineError } from '../adapters/xinference.ts';
import { specsOf } from '../catalog/catalog.repository.ts';
import type { ClustersService } from '../clusters/clusters.service.ts';
import { resolveLaunch } from '../deployments/launch-spec.ts';
import { activeHostedClusters, hostedCatalogModels, saveHostedEndpoint } from './hosted-models.repository.ts';

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

/**
 * Launches the catalog's hosted models (all enabled ones, or those named) on every active hosted
 * cluster through the engine, each in its default launch combination (the catalog's smallest
 * `pytorch` size) on one GPU, and waits until each serves or `timeoutMs` passes; every launch is
 * recorded in `hosted_model_endpoints` with its state (`launching` while it loads).
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
  const specs = await specsOf(db, models.map((m) => m.id));
  const deadline = Date.now() + (options.timeoutMs ?? 600_000);
  const launches = targets.flatMap((cluster) => models.map((model) => ({ cluster, model })));
  return Promise.all(
    launches.map(async ({ cluster, model }): Promise<HostedLaunchOutcome> => {
      const base = { model: model.model_name, cluster: cluster.name };
      const uid = hostedModelUid(model.model_name);
      const save = (state: HostedLaunchOutcome['state'], reason: string | null) =>
        saveHostedEndpoint(db, { model_name: model.model_name, cluster_id: cluster.id, engine_model_uid: uid, state, state_reason: reason });
      const resolved = resolveLaunch(
        specs.filter((s) => s.deployable_model_id === model.id).map((s) => ({ ...s, modelFormat: s.model_format, modelSizeInBillions: Number(s.model_size_in_billions), modelEngine: s.model_engine })),
        {},
      );
      if (!resolved.ok) return { ...base, state: 'failed', reason: resolved.reason };
      const client = await clusters.clientOf(cluster.id);
      await save('launching', null);
      try {
        await client.launch({ modelUid: uid, modelName: model.model_name, modelType: model.model_type, gpuCount: 1, ...resolved.launch });
        for (;;) {
          const state = await client.state(uid);
          if (state.state === 'ready') {
            await save('running', null);
            return { ...base, state: 'running' };
          }
          if (state.state === 'error' || state.state === 'missing') {
            const reason = state.state === 'error' ? state.message : 'the engine no longer knows the model';
            await save('failed', reason);
            return { ...base, state: 'failed', reason };
          }
          if (Date.now() > deadline) return { ...base, state: 'launching', reason: 'still loading; run `hosted launch` again to wait for it' };
          await delay(options.pollMs ?? 1_000);
        }
      } catch (error) {
        if (!(error instanceof EngineError)) throw error;
        await save('failed', error.message);
        return { ...base, state: 'failed', reason: error.message };
      }
    }),
  );
}
