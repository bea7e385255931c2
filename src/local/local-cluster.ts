import type { Logger } from 'pino';
import type { ClustersService } from '../clusters/clusters.service.ts';
import { startClusterSimulator, type ClusterSimulator, type ClusterSimulatorOptions, type SimulatedWorker } from './cluster-simulator.ts';

export const LOCAL_CLUSTER_NAME = 'local-simulator';
/**
 * The same simulator registered a second time as the platform's hosted cluster: dedicated
 * deployments are never placed on a hosted cluster, so one engine serves both under two names.
 */
export const LOCAL_HOSTED_CLUSTER_NAME = 'local-hosted';

/** The simulated inventory: one worker each of three real instance types, with their NVML GPU names. */
export const DEFAULT_WORKERS: SimulatedWorker[] = [
  { name: 'sim-a10g-0', gpuName: 'NVIDIA A10G', gpuCount: 4, gpuMemoryGb: 24 },
  { name: 'sim-l40s-0', gpuName: 'NVIDIA L40S', gpuCount: 4, gpuMemoryGb: 48 },
  { name: 'sim-h100-0', gpuName: 'NVIDIA H100 80GB HBM3', gpuCount: 8, gpuMemoryGb: 80 },
];

/** Settings of the local simulator beyond its defaults (three workers, 3 s model loads, 20 ms per token). */
export interface LocalSimulatorOptions {
  log: Logger;
  port?: number;
  modelLoadMs?: number;
  tokenLatencyMs?: number;
  workers?: SimulatedWorker[];
  simulator?: Partial<ClusterSimulatorOptions>;
}

/** Starts the GPU cluster simulator (a local stand-in for a Xinference 3.x cluster, authentication on). */
export function startLocalSimulator(options: LocalSimulatorOptions): Promise<ClusterSimulator> {
  return startClusterSimulator({
    port: options.port ?? 0,
    workers: options.workers ?? DEFAULT_WORKERS,
    modelLoadMs: options.modelLoadMs ?? 3000,
    tokenLatencyMs: options.tokenLatencyMs ?? 20,
    log: options.log,
    ...options.simulator,
  });
}

/**
 * Registers the simulator as the cluster `local-simulator` (and as the hosted cluster `local-hosted`)
 * with its admin user and an API key, and syncs its inventory, exactly as an operator would a real one.
 */
export async function registerLocalCluster(clusters: ClustersService, simulator: ClusterSimulator, log: Logger): Promise<void> {
  const { credentials } = simulator;
  const registration = {
    provider: 'local',
    region: 'simulator',
    endpoint: simulator.url,
    auth: credentials ? ({ mode: 'advanced', username: credentials.adminUser, password: credentials.adminPassword, apiKey: credentials.apiKey } as const) : ({ mode: 'none' } as const),
  };
  const cluster = await clusters.register({ name: LOCAL_CLUSTER_NAME, ...registration });
  await clusters.register({ name: LOCAL_HOSTED_CLUSTER_NAME, hosted: true, ...registration });
  const synced = await clusters.sync(cluster.id);
  log.info({ cluster: LOCAL_CLUSTER_NAME, instances: synced.instances }, 'GPU cluster simulator (local stand-in) registered');
}

/** Starts the simulator and registers it (the tests' cluster); stops it again when registering fails. */
export async function startLocalCluster(options: LocalSimulatorOptions & { clusters: ClustersService }): Promise<ClusterSimulator> {
  const simulator = await startLocalSimulator(options);
  try {
    await registerLocalCluster(options.clusters, simulator, options.log);
  } catch (error) {
    await simulator.stop();
    throw error;
  }
  return simulator;
}
