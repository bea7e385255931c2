import type { Logger } from 'pino';
import type { ClustersService } from '../clusters/clusters.service.ts';
import { randomToken } from '../crypto.ts';
import { startClusterSimulator, type ClusterSimulator, type SimulatedWorker } from './cluster-simulator.ts';

export const LOCAL_CLUSTER_NAME = 'local-simulator';

/** The simulated inventory: one worker each of three real instance types. */
export const DEFAULT_WORKERS: SimulatedWorker[] = [
  { name: 'sim-a10g-0', gpuType: 'A10G', gpuCount: 4, gpuMemoryGb: 24 },
  { name: 'sim-l40s-0', gpuType: 'L40S', gpuCount: 4, gpuMemoryGb: 48 },
  { name: 'sim-h100-0', gpuType: 'H100', gpuCount: 8, gpuMemoryGb: 80 },
];

/**
 * Starts the GPU cluster simulator (a local stand-in for a Xinference cluster), registers it as a
 * cluster with a fresh API key, and syncs its inventory, exactly as an operator would a real one.
 */
export async function startLocalCluster(options: {
  clusters: ClustersService;
  log: Logger;
  port?: number;
  modelLoadMs?: number;
  tokenLatencyMs?: number;
  workers?: SimulatedWorker[];
}): Promise<ClusterSimulator> {
  const apiKey = randomToken(20);
  const simulator = await startClusterSimulator({
    port: options.port ?? 0,
    apiKey,
    workers: options.workers ?? DEFAULT_WORKERS,
    modelLoadMs: options.modelLoadMs ?? 3000,
    tokenLatencyMs: options.tokenLatencyMs ?? 20,
    log: options.log,
  });
  try {
    const cluster = await options.clusters.register({ name: LOCAL_CLUSTER_NAME, provider: 'local', region: 'simulator', endpoint: simulator.url, apiKey });
    const synced = await options.clusters.sync(cluster.id);
    options.log.info({ cluster: LOCAL_CLUSTER_NAME, instances: synced.instances }, 'GPU cluster simulator (local stand-in) registered');
  } catch (error) {
    await simulator.stop();
    throw error;
  }
  return simulator;
}
