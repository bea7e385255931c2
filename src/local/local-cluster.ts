import type { Logger } from 'pino';
import type { ClustersService } from '../clusters/clusters.service.ts';
import { startClusterSimulator, type ClusterSimulator, type ClusterSimulatorOptions, type SimulatedWorker } from './cluster-simulator.ts';

export const LOCAL_CLUSTER_NAME = 'local-simulator';

/** The simulated inventory: one worker each of three real instance types, with their NVML GPU names. */
export const DEFAULT_WORKERS: SimulatedWorker[] = [
  { name: 'sim-a10g-0', gpuName: 'NVIDIA A10G', gpuCount: 4, gpuMemoryGb: 24 },
  { name: 'sim-l40s-0', gpuName: 'NVIDIA L40S', gpuCount: 4, gpuMemoryGb: 48 },
  { name: 'sim-h100-0', gpuName: 'NVIDIA H100 80GB HBM3', gpuCount: 8, gpuMemoryGb: 80 },
];

/**
 * Starts the GPU cluster simulator (a local stand-in for a Xinference 3.x cluster, authentication
 * on), registers it as a cluster with its admin user and an API key, and syncs its inventory,
 * exactly as an operator would a real one.
 */
export async function startLocalCluster(options: {
  clusters: ClustersService;
  log: Logger;
  port?: number;
  modelLoadMs?: number;
  tokenLatencyMs?: number;
  workers?: SimulatedWorker[];
  simulator?: Partial<ClusterSimulatorOptions>;
}): Promise<ClusterSimulator> {
  const simulator = await startClusterSimulator({
    port: options.port ?? 0,
    workers: options.workers ?? DEFAULT_WORKERS,
    modelLoadMs: options.modelLoadMs ?? 3000,
    tokenLatencyMs: options.tokenLatencyMs ?? 20,
    log: options.log,
    ...options.simulator,
  });
  try {
    const { credentials } = simulator;
    const cluster = await options.clusters.register({
      name: LOCAL_CLUSTER_NAME,
      provider: 'local',
      region: 'simulator',
      endpoint: simulator.url,
      auth: credentials
        ? { mode: 'advanced', username: credentials.adminUser, password: credentials.adminPassword, apiKey: credentials.apiKey }
        : { mode: 'none' },
    });
    const synced = await options.clusters.sync(cluster.id);
    options.log.info({ cluster: LOCAL_CLUSTER_NAME, instances: synced.instances }, 'GPU cluster simulator (local stand-in) registered');
  } catch (error) {
    await simulator.stop();
    throw error;
  }
  return simulator;
}
