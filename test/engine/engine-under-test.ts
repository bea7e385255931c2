import { randomBytes } from 'node:crypto';
import { XinferenceClient, type LaunchSpec, type ManagementCredentials, type XinferenceClientOptions } from '../../src/adapters/xinference.ts';
import { startClusterSimulator, type ClusterSimulator, type ClusterSimulatorOptions } from '../../dev/cluster-simulator.ts';

/**
 * The engine the conformance suite runs against: the cluster simulator (in `make test`), or a real
 * Xinference cluster (`XINFERENCE_URL=… make test-engine`) with credentials from the environment:
 *
 *   XINFERENCE_URL                 the supervisor, e.g. https://xinference.internal:9997
 *   XINFERENCE_ADMIN_USER          a user with the admin permission
 *   XINFERENCE_ADMIN_PASSWORD      its password
 *   XINFERENCE_API_KEY             an API key (xf-…) for inference
 *   XINFERENCE_TEST_MODEL          optional, the model to launch, as JSON: {"modelName","modelType",
 *                                  "modelEngine","modelFormat","modelSizeInBillions","quantization","gpuCount"}
 *                                  (default: qwen2.5-instruct 0.5B, pytorch, vLLM, one GPU)
 *   XINFERENCE_TEST_LOAD_TIMEOUT_SECONDS   how long the model may take to load (default 900)
 *   XINFERENCE_TEST_REPLICA_MODEL  optional, the model the replica tests scale (same JSON; default the
 *                                  test model): they run up to three replicas at once, so three free
 *                                  GPUs for a vLLM model (it takes 90% of its GPU), or one for a
 *                                  model that shares its GPU
 *   XINFERENCE_TEST_EMBEDDING_MODEL, XINFERENCE_TEST_IMAGE_MODEL, XINFERENCE_TEST_AUDIO_MODEL
 *                                  optional launch specs (same JSON) of an embedding, an image and a
 *                                  speech-to-text model, for the tests of those routes (skipped
 *                                  without), e.g. {"modelName":"whisper-large-v3","modelType":"audio",
 *                                  "modelEngine":"transformers","modelFormat":"pytorch",
 *                                  "modelSizeInBillions":1.55,"quantization":"none","gpuCount":1}
 *   XINFERENCE_TEST_CHAT_WITHOUT_TOOLS_MODEL
 *                                  optional launch spec of a chat model outside Xinference's
 *                                  tool-call families (e.g. mistral-instruct-v0.3), for the refusal
 *                                  of tools (skipped without)
 *
 * The test model must be of a family that calls tools (qwen2.5-instruct does), for the tool checks.
 * The real cluster must have one free GPU for the test model. Tests that need failure injection
 * (crashes, out-of-memory loads, revoked credentials, the address ban) run against the simulator only.
 */
export interface EngineUnderTest {
  url: string;
  admin: ManagementCredentials;
  apiKey: string;
  /** Undefined against a real cluster. */
  simulator: ClusterSimulator | undefined;
  client(options?: Omit<XinferenceClientOptions, 'management'>): XinferenceClient;
  /** The test model, launched under a fresh uid. */
  launchSpec(): LaunchSpec;
  /** The model the replica tests scale, under a fresh uid. */
  replicaSpec(): LaunchSpec;
  /** A model of another kind under a fresh uid, or undefined when none is configured (a real cluster). */
  launchSpecFor(kind: OtherModel): LaunchSpec | undefined;
  loadTimeoutMs: number;
  /** How often to poll the engine. */
  pollMs: number;
  stop(): Promise<void>;
}

export const REAL_ENGINE = Boolean(process.env.XINFERENCE_URL);

export type OtherModel = 'embedding' | 'image' | 'audio' | 'chat_without_tools';

const freshUid = () => `conformance-${randomBytes(6).toString('hex')}`;

/**
 * What the simulator launches for each kind: catalog models, as the platform would launch them,
 * placed where they fit beside a vLLM model (which takes 90% of its GPU) on the first A10G.
 */
const SIMULATED: Record<OtherModel, Omit<LaunchSpec, 'modelUid'>> = {
  embedding: { modelName: 'bge-m3', modelType: 'embedding', modelEngine: 'sentence_transformers', modelFormat: 'pytorch', modelSizeInBillions: 0.57, quantization: 'none', gpuCount: 1, workerAddress: 'sim-a10g:30001' },
  image: { modelName: 'FLUX.1-schnell', modelType: 'image', modelEngine: 'diffusers', modelFormat: 'diffusers', modelSizeInBillions: 12, quantization: 'none', gpuCount: 1, workerAddress: 'sim-h100:30001' },
  audio: { modelName: 'whisper-large-v3', modelType: 'audio', modelEngine: 'transformers', modelFormat: 'pytorch', modelSizeInBillions: 1.55, quantization: 'none', gpuCount: 1, workerAddress: 'sim-h100:30001' },
  chat_without_tools: { modelName: 'mistral-instruct-v0.3', modelType: 'LLM', modelEngine: 'vLLM', modelFormat: 'pytorch', modelSizeInBillions: 7, quantization: 'none', gpuCount: 1, workerAddress: 'sim-h100:30001' },
};

/** The model each suite launches unless XINFERENCE_TEST_MODEL says otherwise: the smallest chat model. */
const DEFAULT_LAUNCH: Omit<LaunchSpec, 'modelUid'> = {
  modelName: 'qwen2.5-instruct',
  modelType: 'LLM',
  modelEngine: 'vLLM',
  modelFormat: 'pytorch',
  modelSizeInBillions: 0.5,
  quantization: 'none',
  gpuCount: 1,
};

export async function engineUnderTest(options: ClusterSimulatorOptions = {}): Promise<EngineUnderTest> {
  const env = process.env;
  if (REAL_ENGINE) {
    const missing = ['XINFERENCE_ADMIN_USER', 'XINFERENCE_ADMIN_PASSWORD', 'XINFERENCE_API_KEY'].filter((name) => !env[name]);
    if (missing.length) throw new Error(`make test-engine needs ${missing.join(', ')} beside XINFERENCE_URL`);
    const url = (env.XINFERENCE_URL as string).replace(/\/+$/, '');
    const admin = { username: env.XINFERENCE_ADMIN_USER as string, password: env.XINFERENCE_ADMIN_PASSWORD as string };
    const model = JSON.parse(env.XINFERENCE_TEST_MODEL ?? '{}') as Partial<LaunchSpec>;
    return {
      url,
      admin,
      apiKey: env.XINFERENCE_API_KEY as string,
      simulator: undefined,
      client: (clientOptions = {}) => new XinferenceClient(url, { ...clientOptions, management: admin }),
      launchSpec: () => ({ ...DEFAULT_LAUNCH, ...model, modelUid: freshUid() }),
      replicaSpec: () => ({ ...DEFAULT_LAUNCH, ...model, ...(JSON.parse(env.XINFERENCE_TEST_REPLICA_MODEL ?? '{}') as Partial<LaunchSpec>), modelUid: freshUid() }),
      launchSpecFor: (kind) => {
        const configured = env[`XINFERENCE_TEST_${kind.toUpperCase()}_MODEL`];
        return configured ? { ...(JSON.parse(configured) as Omit<LaunchSpec, 'modelUid'>), modelUid: freshUid() } : undefined;
      },
      loadTimeoutMs: Number(env.XINFERENCE_TEST_LOAD_TIMEOUT_SECONDS ?? 900) * 1000,
      pollMs: 1000,
      stop: async () => undefined,
    };
  }
  const simulator = await startClusterSimulator({
    workers: [
      { name: 'sim-a10g', gpuName: 'NVIDIA A10G', gpuCount: 2, gpuMemoryGb: 24 },
      { name: 'sim-h100', gpuName: 'NVIDIA H100 80GB HBM3', gpuCount: 1, gpuMemoryGb: 80 },
    ],
    modelLoadMs: 800,
    tokenLatencyMs: 1,
    completionTokens: 4,
    ...options,
  });
  const credentials = simulator.credentials;
  if (!credentials) throw new Error('the conformance suite needs the simulator with authentication on');
  const admin = { username: credentials.adminUser, password: credentials.adminPassword };
  return {
    url: simulator.url,
    admin,
    apiKey: credentials.apiKey,
    simulator,
    client: (clientOptions = {}) => new XinferenceClient(simulator.url, { engineVersion: '3.2.0', ...clientOptions, management: admin }),
    launchSpec: () => ({ ...DEFAULT_LAUNCH, modelUid: freshUid() }),
    replicaSpec: () => ({ ...DEFAULT_LAUNCH, modelUid: freshUid() }),
    launchSpecFor: (kind) => ({ ...SIMULATED[kind], modelUid: freshUid() }),
    loadTimeoutMs: 20_000,
    pollMs: 20,
    stop: () => simulator.stop(),
  };
}

/** Polls `probe` every `everyMs` until it returns a value other than undefined, or fails after `timeoutMs`. */
export async function poll<T>(probe: () => Promise<T | undefined>, what: string, timeoutMs: number, everyMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}
