import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { startClusterSimulator, type SimulatedWorker } from './cluster-simulator.ts';

/**
 * Runs the local GPU cluster simulator (a stand-in for a Xinference 3.x cluster) as its own process.
 *
 *   node dev/cluster-simulator.cli.ts --port 9997 --workers '[{"name":"w0","gpuName":"NVIDIA A10G","gpuCount":4,"gpuMemoryGb":24}]'
 *
 * Every flag can also come from the environment: CLUSTER_SIMULATOR_HOST, CLUSTER_SIMULATOR_PORT,
 * CLUSTER_SIMULATOR_WORKERS (JSON), CLUSTER_SIMULATOR_MODEL_LOAD_MS, CLUSTER_SIMULATOR_TOKEN_LATENCY_MS,
 * CLUSTER_SIMULATOR_COMPLETION_TOKENS. Flags win. Authentication is on, as in Xinference 3.x: the
 * admin user `admin` has the password CLUSTER_SIMULATOR_ADMIN_PASSWORD and the API key
 * CLUSTER_SIMULATOR_API_KEY (environment only, never flags; generated and printed on stderr when
 * unset); CLUSTER_SIMULATOR_AUTH=none runs it without authentication.
 * Prints the URL alone on stdout once listening (JSON logs go to stderr, level LOG_LEVEL); stops on
 * SIGTERM or SIGINT.
 */
const { values } = parseArgs({
  options: {
    host: { type: 'string' },
    port: { type: 'string' },
    workers: { type: 'string' },
    'model-load-ms': { type: 'string' },
    'token-latency-ms': { type: 'string' },
    'completion-tokens': { type: 'string' },
  },
});

const env = process.env;
// Logs go to stderr so that stdout carries only the URL for a parent process to read.
const log = pino({ level: env.LOG_LEVEL ?? 'info', base: { service: 'cluster-simulator' } }, pino.destination(2));

function numberSetting(flag: string | undefined, variable: string): number | undefined {
  const raw = flag ?? env[variable];
  if (raw === undefined || raw === '') return undefined;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < 0) throw new Error(`${variable} must be a number >= 0, got ${JSON.stringify(raw)}`);
  return value;
}

function workerSetting(raw: string | undefined): SimulatedWorker[] | undefined {
  if (raw === undefined || raw === '') return undefined;
  const parsed: unknown = JSON.parse(raw);
  const valid =
    Array.isArray(parsed) &&
    parsed.every(
      (w: unknown) =>
        typeof w === 'object' &&
        w !== null &&
        typeof (w as SimulatedWorker).name === 'string' &&
        typeof (w as SimulatedWorker).gpuName === 'string' &&
        Number.isInteger((w as SimulatedWorker).gpuCount) &&
        typeof (w as SimulatedWorker).gpuMemoryGb === 'number',
    );
  if (!valid) throw new Error('CLUSTER_SIMULATOR_WORKERS must be a JSON array of {name, gpuName (as NVML names it), gpuCount, gpuMemoryGb[, address]}');
  return parsed as SimulatedWorker[];
}

const simulator = await startClusterSimulator({
  host: values.host ?? env.CLUSTER_SIMULATOR_HOST ?? '127.0.0.1',
  port: numberSetting(values.port, 'CLUSTER_SIMULATOR_PORT') ?? 0,
  auth: env.CLUSTER_SIMULATOR_AUTH === 'none' ? false : {},
  adminPassword: env.CLUSTER_SIMULATOR_ADMIN_PASSWORD || undefined,
  apiKey: env.CLUSTER_SIMULATOR_API_KEY || undefined,
  workers: workerSetting(values.workers ?? env.CLUSTER_SIMULATOR_WORKERS),
  modelLoadMs: numberSetting(values['model-load-ms'], 'CLUSTER_SIMULATOR_MODEL_LOAD_MS'),
  tokenLatencyMs: numberSetting(values['token-latency-ms'], 'CLUSTER_SIMULATOR_TOKEN_LATENCY_MS'),
  completionTokens: numberSetting(values['completion-tokens'], 'CLUSTER_SIMULATOR_COMPLETION_TOKENS'),
  log,
});
if (simulator.credentials && (!env.CLUSTER_SIMULATOR_ADMIN_PASSWORD || !env.CLUSTER_SIMULATOR_API_KEY)) {
  process.stderr.write(`admin password: ${simulator.credentials.adminPassword}\nAPI key: ${simulator.credentials.apiKey}\n`);
}
process.stdout.write(`${simulator.url}\n`);

let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    simulator.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        log.error({ err: error }, 'cluster simulator did not stop cleanly');
        process.exit(1);
      },
    );
  });
}
