import type { Logger } from 'pino';
import type { ClustersService } from '../src/clusters/clusters.service.ts';
import { startClusterSimulator, type ClusterSimulator, type ClusterSimulatorOptions, type SimulatedWorker } from './cluster-simulator.ts';

export const LOCAL_CLUSTER_NAME = 'local-simulator';
/**
 * The platform's hosted cluster. `make run` gives it a simulator of its own (`HOSTED_WORKERS`), so
 * the hosted models never take the GPUs dedicated deployments are offered; the tests register the
 * same simulator under both names, as an operator may register one real cluster for both uses (one
 * GPU ledger then counts the GPUs of both: src/clusters/gpu-ledger.ts).
 */
export const LOCAL_HOSTED_CLUSTER_NAME = 'local-hosted';

/** The simulated inventory: one worker each of three real instance types, with their NVML GPU names. */
export const DEFAULT_WORKERS: SimulatedWorker[] = [
  { name: 'sim-a10g-0', gpuName: 'NVIDIA A10G', gpuCount: 4, gpuMemoryGb: 24 },
  { name: 'sim-l40s-0', gpuName: 'NVIDIA L40S', gpuCount: 4, gpuMemoryGb: 48 },
  { name: 'sim-h100-0', gpuName: 'NVIDIA H100 80GB HBM3', gpuCount: 8, gpuMemoryGb: 80 },
];

/** The hosted models' simulator under `make run`: one 4 x A10G worker, a GPU for each of the four hosted models. */
export const HOSTED_WORKERS: SimulatedWorker[] = [{ name: 'sim-hosted-a10g-0', gpuName: 'NVIDIA A10G', gpuCount: 4, gpuMemoryGb: 24 }];

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

/** What registering a simulator takes: its endpoint and credentials, as an operator would pass them. */
function registrationOf(simulator: ClusterSimulator) {
  const { credentials } = simulator;
  return {
    provider: 'local',
    region: 'simulator',
    endpoint: simulator.url,
    auth: credentials ? ({ mode: 'advanced', username: credentials.adminUser, password: credentials.adminPassword, apiKey: credentials.apiKey } as const) : ({ mode: 'none' } as const),
  };
}

/**
 * Registers the simulator as the cluster `local-simulator` and the hosted one (the same simulator
 * unless given) as the hosted cluster `local-hosted`, with their admin user and an API key, and
 * syncs the dedicated inventory, exactly as an operator would real ones (`hosted launch` syncs the
 * hosted cluster's).
 */
export async function registerLocalCluster(clusters: ClustersService, simulator: ClusterSimulator, log: Logger, hostedSimulator = simulator): Promise<void> {
  const cluster = await clusters.register({ name: LOCAL_CLUSTER_NAME, ...registrationOf(simulator) });
  await clusters.register({ name: LOCAL_HOSTED_CLUSTER_NAME, hosted: true, ...registrationOf(hostedSimulator) });
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

/**
 * `make run`'s two simulators: the dedicated deployments' (three workers) on `port`, the hosted
 * models' (`HOSTED_WORKERS`) on `hostedPort`; the first is stopped again when the second fails.
 */
export async function startLocalSimulators(options: {
  log: Logger;
  port: number;
  hostedPort: number;
  modelLoadMs: number;
}): Promise<{ dedicated: ClusterSimulator; hosted: ClusterSimulator }> {
  const dedicated = await startLocalSimulator({ log: options.log, port: options.port, modelLoadMs: options.modelLoadMs });
  try {
    const hosted = await startLocalSimulator({ log: options.log, port: options.hostedPort, modelLoadMs: options.modelLoadMs, workers: HOSTED_WORKERS });
    return { dedicated, hosted };
  } catch (error) {
    await dedicated.stop();
    throw error;
  }
}
