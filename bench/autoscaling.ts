/**
 * Elastic deployments benchmark (`make bench-scaling`): the budgets of elastic deployments
 * (docs/decisions/2026-11-29-elastic-deployments.md), each held against the engine's own model load
 * time measured in the same run, everything driven through the service's HTTP API as a customer
 * and the operator CLI as an operator would.
 *
 * One run:
 *  1. `make build` first (the Makefile target depends on it): the service runs as in production,
 *     `node dist/main.js`, ROLE=all, with the autoscaler every AUTOSCALER_INTERVAL_SECONDS (1, the
 *     default) and a scale-down cool-down short enough for the run (BENCH_COOLDOWN_SECONDS, 5);
 *  2. a database: a fresh one on the server of DATABASE_URL (dropped afterwards), or an embedded Postgres;
 *  3. the cluster simulator as its own process, loading a model in BENCH_MODEL_LOAD_MS (3000) and
 *     generating a token every BENCH_TOKEN_MS (50); registered and synced with the operator CLI;
 *     two organizations (each a user registered through the API): one owns deployment A
 *     (min 1, max 3, `target_concurrency` BENCH_TARGET), the other deployment Z (min 0, max 1,
 *     `scale_to_zero_after_seconds` BENCH_SCALE_TO_ZERO_SECONDS), so Z's usage summary is Z's alone;
 *  4. the engine's load time: a model launched on the simulator directly (the platform's engine
 *     client, as the admin user) and its state polled every 10 ms until it serves; once before the
 *     scenarios and once after, the smaller of the two the reference (the stricter one);
 *  5. scale-up reaction: 3 × target concurrent streams through the service in a closed loop on A;
 *     from the moment they were sent to the first new replica serving (its row's `ready_at`, the
 *     moment it is routed; the first GET showing `replicas.ready` >= 2 beside it);
 *  6. scale-down under load: with A at 3 ready replicas and the load going on, PATCH `max_replicas`
 *     to 1; every request in flight at any time from the PATCH until the drained replicas are
 *     stopped must be answered in full;
 *  7. cold start: Z waited to zero, then a burst of BENCH_BURST streamed requests at once; the
 *     first answer's time to its first byte beyond the engine's load time, and every request
 *     answered in full or refused with the documented 503 `deployment_not_running`;
 *  8. idle: after the burst, Z back at zero (no replica desired, ready, starting or draining); the
 *     GPU seconds of Z's organization in the usage summary (GET /v1/billing/usage-summary) read
 *     then and BENCH_IDLE_WINDOW_SECONDS later; the engine's GPUs held by Z's models (the
 *     simulator's state);
 *  9. one table, each budget met or missed, bench/results/scaling-<timestamp>.json and scaling-latest.md.
 *
 * Where the API does not show a time (a replica's row: booked, ready, draining, stopped; the scale
 * events' times), the database is read as an operator would (SQL, read only), and the output says so.
 * It exits 0 whenever it could measure, budgets missed or not; every process it starts is stopped
 * at the end, also on failure or Ctrl-C.
 *
 * Settings (environment): BENCH_MODEL_LOAD_MS (3000), BENCH_TOKEN_MS (50), BENCH_TARGET (2),
 * BENCH_STREAM_TOKENS (40: each stream of the closed loop, 2 s at 50 ms), BENCH_BURST (20),
 * BENCH_SCALE_TO_ZERO_SECONDS (3), BENCH_COOLDOWN_SECONDS (5), BENCH_IDLE_WINDOW_SECONDS (10),
 * BENCH_SERVICE_LOG_LEVEL (warn, as production; `info` logs each scale step with its time),
 * BENCH_KEEP_LOGS, DATABASE_URL.
 */
import pg from 'pg';
import { XinferenceClient, type LaunchSpec } from '../src/adapters/xinference.ts';
import { registeredUser, type ApiClient } from './api-client.ts';
import { SERVICE_NODE_FLAGS, productionServiceEnv, registerCluster, sleep, startService, startSimulator, waitUntil, type Started } from './processes.ts';
import { markdown, out, printReport, resultHead, step, textBudgets, writeResults, type Budget } from './report.ts';
import { benchRun, setting, type BenchRun } from './run.ts';

const settings = {
  modelLoadMs: setting('BENCH_MODEL_LOAD_MS', 3000, 0),
  tokenMs: setting('BENCH_TOKEN_MS', 50, 1),
  target: setting('BENCH_TARGET', 2, 1),
  streamTokens: setting('BENCH_STREAM_TOKENS', 40, 1),
  burst: setting('BENCH_BURST', 20, 1),
  scaleToZeroSeconds: setting('BENCH_SCALE_TO_ZERO_SECONDS', 3, 1),
  cooldownSeconds: setting('BENCH_COOLDOWN_SECONDS', 5, 0),
  idleWindowSeconds: setting('BENCH_IDLE_WINDOW_SECONDS', 10, 1),
  /** The service's own settings of the run (src/config.ts). */
  autoscalerIntervalSeconds: 1,
  /** Above the burst: every request of it is held, none refused for the bound. */
  coldStartMaxHeld: 0,
  coldStartTimeoutSeconds: 60,
  serviceLogLevel: process.env.BENCH_SERVICE_LOG_LEVEL || 'warn',
};
settings.coldStartMaxHeld = Math.max(64, settings.burst * 2);

/** What the budgets allow beyond the engine's load time (the figures). */
const SCALE_UP_SLACK_MS = 5000;
const COLD_START_SLACK_MS = 1000;

const ms = (value: number | undefined) => (value === undefined || Number.isNaN(value) ? '–' : `${Math.round(value)} ms`);
const at = (value: number | undefined, zero: number) => (value === undefined || Number.isNaN(value) ? '–' : `+${Math.round(value - zero)} ms`);

interface Replicas {
  desired: number;
  ready: number;
  starting: number;
  draining: number;
}

interface Deployment {
  id: string;
  status: string;
  failure_stage: string | null;
  failure_reason: string | null;
  replicas: Replicas;
}

/** One answer of the service: when it was sent (epoch ms), its first byte, its end, and whether it came in full. */
interface Answer {
  sentAt: number;
  headersAt: number;
  endedAt: number;
  status: number;
  /** The error code of a refused request (`deployment_not_running`). */
  code?: string;
  /** A 200 whose stream ended with a finish reason and `[DONE]`. */
  complete: boolean;
  error?: string;
}

/** A request the documented way of refusing during a cold start: 503 `deployment_not_running`. */
const refusedAsDocumented = (answer: Answer) => answer.status === 503 && answer.code === 'deployment_not_running';
const failed = (answer: Answer) => !(answer.status === 200 && answer.complete);

/** A streamed chat completion through the service, read to its end. */
async function chat(base: string, key: string, model: string, maxTokens: number): Promise<Answer> {
  const sentAt = Date.now();
  let headersAt = NaN;
  try {
    const response = await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Tell me a long story.' }], max_tokens: maxTokens, stream: true }),
      signal: AbortSignal.timeout(120_000),
    });
    headersAt = Date.now();
    const text = await response.text();
    const endedAt = Date.now();
    if (response.status !== 200) {
      let code: string | undefined;
      try {
        code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
      } catch {
        // Not JSON.
      }
      return { sentAt, headersAt, endedAt, status: response.status, ...(code ? { code } : {}), complete: false, error: text.slice(0, 300) };
    }
    const complete = /"finish_reason":"(stop|length)"/.test(text) && /data: \[DONE\]\s*$/.test(text);
    return { sentAt, headersAt, endedAt, status: 200, complete, ...(complete ? {} : { error: `stream cut short: …${text.slice(-200)}` }) };
  } catch (error) {
    return { sentAt, headersAt, endedAt: Date.now(), status: 0, complete: false, error: error instanceof Error ? error.message : String(error) };
  }
}

/** `workers` clients, each sending the next request as soon as its previous answer ends, until stopped. */
class ClosedLoop {
  readonly answers: Answer[] = [];
  #stopped = false;
  readonly #workers: Array<Promise<void>>;

  constructor(workers: number, request: () => Promise<Answer>) {
    this.#workers = Array.from({ length: workers }, async () => {
      while (!this.#stopped) this.answers.push(await request());
    });
  }

  /** No new request; resolves once those in flight are answered. */
  async stop(): Promise<Answer[]> {
    this.#stopped = true;
    await Promise.all(this.#workers);
    return this.answers;
  }
}

/** The operator's read of a deployment's replicas (the API shows their counts, not their times). */
interface ReplicaRow {
  ordinal: number;
  engine_model_uid: string;
  status: string;
  created_at: Date;
  ready_at: Date | null;
  draining_since: Date | null;
  stopped_at: Date | null;
  running_since: Date | null;
  running_until: Date | null;
}

async function replicaRows(db: pg.Client, deploymentId: string): Promise<ReplicaRow[]> {
  const { rows } = await db.query<ReplicaRow>(
    'select ordinal, engine_model_uid, status, created_at, ready_at, draining_since, stopped_at, running_since, running_until from deployment_replicas where deployment_id = $1 order by ordinal',
    [deploymentId],
  );
  return rows;
}

/** The deployment's `deployment.scaled` events (what its event stream carries), with their times. */
async function scaleEvents(db: pg.Client, deploymentId: string): Promise<Array<{ scale: { from: number; to: number; reason: string }; created_at: Date }>> {
  const { rows } = await db.query<{ scale: { from: number; to: number; reason: string }; created_at: Date }>(
    "select scale, created_at from deployment_events where deployment_id = $1 and type = 'deployment.scaled' order by id",
    [deploymentId],
  );
  return rows;
}

interface SimulatorState {
  workers: Array<{ gpus: Array<{ index: number; held_by: string[] }> }>;
  models: Array<{ model_uid: string; replicas: Array<{ requests: number; in_flight: number }> }>;
  launches: Array<{ model_uid: string; body: Record<string, unknown>; at: string }>;
  aborted_requests: number;
}

/** The engine's time for a model: launched on the simulator directly, its state polled every 10 ms until it serves, then stopped. */
async function engineLoadMs(engine: XinferenceClient, spec: LaunchSpec): Promise<number> {
  const started = performance.now();
  await engine.launch(spec);
  for (;;) {
    const state = await engine.state(spec.modelUid);
    if (state.state === 'ready') break;
    if (state.state === 'error' || state.state === 'missing') throw new Error(`the engine's probe model ${spec.modelUid} is ${state.state}`);
    if (performance.now() - started > 120_000) throw new Error(`the engine's probe model ${spec.modelUid} was not ready after 120 s`);
    await sleep(10);
  }
  const loaded = performance.now() - started;
  await waitUntil(`the probe model ${spec.modelUid} to stop`, async () => (await engine.stop(spec.modelUid)) === 'stopped', 30_000, undefined, 100);
  return loaded;
}

async function untilDeployment(api: ApiClient, id: string, what: string, done: (d: Deployment) => boolean, timeoutMs: number, service: Started, everyMs = 50): Promise<{ deployment: Deployment; at: number }> {
  let seen: Deployment | undefined;
  await waitUntil(
    `deployment ${id}: ${what}`,
    async () => {
      seen = await api.get<Deployment>(`/api/v1/model-deployments/${id}`);
      if (seen.status === 'failed') throw new Error(`deployment failed at ${seen.failure_stage}: ${seen.failure_reason}`);
      return done(seen);
    },
    timeoutMs,
    service,
    everyMs,
  ).catch((error: unknown) => {
    throw new Error(`${error instanceof Error ? error.message : String(error)} (last seen ${JSON.stringify(seen?.replicas)}, ${seen?.status})`);
  });
  return { deployment: seen as Deployment, at: Date.now() };
}

const atZero = (d: Deployment) => d.status === 'running' && d.replicas.desired === 0 && d.replicas.ready === 0 && d.replicas.starting === 0 && d.replicas.draining === 0;

/** GPU seconds of the caller's organization in the current period, as the usage summary shows them. */
async function gpuSeconds(api: ApiClient): Promise<number> {
  const summary = await api.get<{ usage_totals: Array<{ meter: string; total_quantity: string }> }>('/v1/billing/usage-summary');
  return summary.usage_totals.filter((total) => total.meter === 'gpu_instance_seconds').reduce((sum, total) => sum + Number(total.total_quantity), 0);
}

function check(name: string, limit: string, value: number | undefined, unit: string, ok: (v: number) => boolean): Budget {
  return { name, limit, value, unit, met: value === undefined || Number.isNaN(value) ? undefined : ok(value) };
}

async function measure(run: BenchRun): Promise<void> {
  // Database, simulator, service, operator set-up.
  const database = await run.openDatabase({ prefix: 'mds_bench_scaling' });
  step(database.description);
  const simulator = await startSimulator(run.logs, {
    // Room for A's three replicas, Z's one and the load-time probe.
    gpuCount: 8,
    modelLoadMs: settings.modelLoadMs,
    completionTokens: Math.max(settings.streamTokens, 16) * 4,
    tokenLatencyMs: settings.tokenMs,
  });
  step(`simulator (pid ${simulator.process.pid}) at ${simulator.url}, models load in ${settings.modelLoadMs} ms`);
  // The simulator's controls are the admin's (an access token; API keys may only read and list models).
  const signIn = await fetch(`${simulator.url}/token`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'admin', password: simulator.adminPassword }) });
  const { access_token: simulatorToken } = (await signIn.json()) as { access_token: string };
  const simulatorState = async () => {
    const response = await fetch(`${simulator.url}/_simulator/state`, { headers: { authorization: `Bearer ${simulatorToken}` } });
    if (!response.ok) throw new Error(`the simulator's state answered ${response.status}: ${await response.text()}`);
    return (await response.json()) as SimulatorState;
  };

  const { env: serviceEnv, base } = await productionServiceEnv({ databaseUrl: database.url, role: 'all' });
  Object.assign(serviceEnv, {
    LOG_LEVEL: settings.serviceLogLevel,
    AUTOSCALER_INTERVAL_SECONDS: String(settings.autoscalerIntervalSeconds),
    SCALE_DOWN_COOLDOWN_SECONDS: String(settings.cooldownSeconds),
    COLD_START_MAX_HELD_REQUESTS: String(settings.coldStartMaxHeld),
    COLD_START_TIMEOUT_SECONDS: String(settings.coldStartTimeoutSeconds),
  });
  const service = await startService(run.logs, { env: serviceEnv, base });
  step(`service (pid ${service.pid}) at ${base}, ROLE=all, LOG_LEVEL=${settings.serviceLogLevel}`);
  for (const line of await registerCluster(run.logs, serviceEnv, simulator)) step(line);

  const sql = new pg.Client({ connectionString: database.url });
  run.atEnd(() => sql.end());
  await sql.connect();
  const customer = (name: string) => registeredUser(base, sql, `bench-scaling-${name}-${Date.now()}@example.com`, `Benchmark ${name}`);
  const owners = { a: await customer('a'), z: await customer('z') };
  const created = {
    a: await owners.a.post<Deployment>('/api/v1/model-deployments', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7, min_replicas: 1, max_replicas: 3, target_concurrency: settings.target }),
    z: await owners.z.post<Deployment>('/api/v1/model-deployments', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7, min_replicas: 0, max_replicas: 1, scale_to_zero_after_seconds: settings.scaleToZeroSeconds }),
  };
  const a = created.a.id;
  const z = created.z.id;
  await untilDeployment(owners.a, a, 'running with one replica ready', (d) => d.status === 'running' && d.replicas.ready === 1, 60_000, service);
  await untilDeployment(owners.z, z, 'running', (d) => d.status === 'running', 60_000, service);
  const keys = {
    a: (await owners.a.post<{ key: string }>('/v1/organization/api-keys', { name: 'bench-scaling', deployment_ids: [a] })).key,
    z: (await owners.z.post<{ key: string }>('/v1/organization/api-keys', { name: 'bench-scaling', deployment_ids: [z] })).key,
  };
  step(`deployment A ${a} (organization a): min 1, max 3, target_concurrency ${settings.target}, running; deployment Z ${z} (organization z): min 0, max 1, scale_to_zero_after_seconds ${settings.scaleToZeroSeconds}, running`);

  // The engine's own load time, launched as the service launches a replica (the same request body).
  const launched = (await simulatorState()).launches[0]?.body;
  if (!launched) throw new Error('the simulator saw no launch');
  const engine = new XinferenceClient(simulator.url, { management: { username: 'admin', password: simulator.adminPassword }, engineVersion: '3.2.0' });
  const probeSpec = (n: number): LaunchSpec => ({
    modelUid: `bench-load-probe-${n}`,
    modelName: String(launched.model_name),
    modelType: String(launched.model_type),
    modelEngine: String(launched.model_engine),
    modelFormat: String(launched.model_format),
    modelSizeInBillions: Number(launched.model_size_in_billions),
    quantization: String(launched.quantization),
    gpuCount: Number(launched.n_gpu ?? 1),
  });
  const engineLoads = [await engineLoadMs(engine, probeSpec(1))];
  step(`engine load time, a model launched directly and polled every 10 ms until it serves: ${ms(engineLoads[0])}`);

  // 1. Scale-up reaction, then 3. scale-down under the same load.
  const streams = 3 * settings.target;
  step(`scale-up: ${streams} concurrent streams of ${settings.streamTokens} tokens (${((settings.streamTokens * settings.tokenMs) / 1000).toFixed(1)} s each) on A in a closed loop`);
  const loadSentAt = Date.now();
  const loop = new ClosedLoop(streams, () => chat(base, keys.a, a, settings.streamTokens));
  run.atEnd(() => loop.stop());
  const firstSeen = await untilDeployment(owners.a, a, 'two replicas ready', (d) => d.replicas.ready >= 2, 60_000, service);
  const allSeen = await untilDeployment(owners.a, a, 'three replicas ready', (d) => d.replicas.ready === 3, 60_000, service);
  const upRows = await replicaRows(sql, a);
  const newReplicas = upRows.filter((row) => row.ordinal > 0);
  const firstReady = Math.min(...newReplicas.map((row) => row.ready_at?.getTime() ?? Number.POSITIVE_INFINITY));
  const upEvent = (await scaleEvents(sql, a)).find((event) => event.scale.reason === 'load' && event.scale.to > event.scale.from);
  const launchesAfter = (await simulatorState()).launches;
  const engineLaunchOf = (uid: string) => {
    const launch = launchesAfter.find((l) => l.model_uid === uid);
    return launch ? Date.parse(launch.at) : NaN;
  };
  const first = newReplicas.find((row) => row.ready_at?.getTime() === firstReady);
  const scaleUp = {
    reactionMs: firstReady - loadSentAt,
    firstGetMs: firstSeen.at - loadSentAt,
    allReadyGetMs: allSeen.at - loadSentAt,
    decidedMs: upEvent ? upEvent.created_at.getTime() - loadSentAt : NaN,
    decision: upEvent?.scale,
    bookedMs: first ? first.created_at.getTime() - loadSentAt : NaN,
    engineLaunchMs: first ? engineLaunchOf(first.engine_model_uid) - loadSentAt : NaN,
    readyMs: firstReady - loadSentAt,
  };
  step(
    `a new replica served ${ms(scaleUp.reactionMs)} after the load began (its ready_at; GET showed ready >= 2 at ${ms(scaleUp.firstGetMs)}, 3 at ${ms(scaleUp.allReadyGetMs)}): ` +
      `decided ${at(scaleUp.decidedMs, 0)} (${JSON.stringify(scaleUp.decision)}), replica booked ${at(scaleUp.bookedMs, 0)}, engine launch ${at(scaleUp.engineLaunchMs, 0)}, ready ${at(scaleUp.readyMs, 0)}`,
  );

  // 3. Scale-down under load: PATCH max_replicas to 1 while the streams go on.
  await sleep(2 * settings.streamTokens * settings.tokenMs); // every replica serving some of the load
  const onEngine = (await simulatorState()).models.filter((m) => upRows.some((row) => row.engine_model_uid === m.model_uid));
  const inFlightAtPatch = onEngine.map((m) => m.replicas.reduce((sum, r) => sum + r.in_flight, 0));
  const patchedAt = Date.now();
  const patched = await owners.a.request<Deployment>('PATCH', `/api/v1/model-deployments/${a}`, { max_replicas: 1 });
  step(`scale-down: PATCH max_replicas 1 under the same load (desired now ${patched.replicas.desired}); requests in flight on the engine's three replicas just before: ${inFlightAtPatch.join(', ')}`);
  await untilDeployment(owners.a, a, 'one replica ready, none draining', (d) => d.replicas.ready === 1 && d.replicas.draining === 0 && d.replicas.starting === 0, 120_000, service, 100);
  await waitUntil('the drained replicas to be stopped', async () => (await replicaRows(sql, a)).filter((row) => row.ordinal > 0).every((row) => row.status === 'stopped'), 60_000, service);
  const downRows = (await replicaRows(sql, a)).filter((row) => row.status === 'stopped');
  const stoppedAt = Math.max(...downRows.map((row) => row.stopped_at?.getTime() ?? 0));
  const answersA = await loop.stop();
  const duringDrain = answersA.filter((answer) => answer.sentAt <= stoppedAt && answer.endedAt >= patchedAt);
  const drainFailed = duringDrain.filter(failed);
  const scaleUpFailed = answersA.filter((answer) => answer.endedAt < patchedAt).filter(failed);
  const abortedOnEngine = (await simulatorState()).aborted_requests;
  const drain = {
    inFlightAtPatch,
    answeredDuring: duringDrain.length,
    failed: drainFailed.length,
    drainingSinceMs: Math.min(...downRows.map((row) => row.draining_since?.getTime() ?? Number.POSITIVE_INFINITY)) - patchedAt,
    stoppedMs: stoppedAt - patchedAt,
    abortedOnEngine,
    failures: drainFailed.slice(0, 5).map((answer) => `${answer.status}: ${answer.error ?? ''}`),
  };
  step(
    `${drain.answeredDuring} requests in flight between the PATCH and the last drained replica stopped (draining from ${at(drain.drainingSinceMs, 0)}, stopped ${at(drain.stoppedMs, 0)}): ` +
      `${drain.failed} failed; the engine saw ${abortedOnEngine} requests cut off; ${scaleUpFailed.length} of ${answersA.length - duringDrain.length} earlier ones failed`,
  );
  for (const failure of drain.failures) out(`    ${failure}`);

  // 2. Cold start: Z at zero, then a burst.
  await untilDeployment(owners.z, z, 'scaled to zero', atZero, 60_000, service, 100);
  await waitUntil("Z's replicas stopped", async () => (await replicaRows(sql, z)).every((row) => row.status === 'stopped'), 60_000, service);
  const zeroRows = await replicaRows(sql, z);
  step(`Z at zero (desired 0, ready 0, starting 0, draining 0; ${zeroRows.length} replica stopped); a burst of ${settings.burst} streamed requests`);
  const burstSentAt = Date.now();
  const burst = await Promise.all(Array.from({ length: settings.burst }, () => chat(base, keys.z, z, 4)));
  const served = burst.filter((answer) => !failed(answer));
  const firstByte = Math.min(...served.map((answer) => answer.headersAt)) - burstSentAt;
  const lastByte = Math.max(...served.map((answer) => answer.headersAt)) - burstSentAt;
  const badBurst = burst.filter((answer) => failed(answer) && !refusedAsDocumented(answer));
  const wakeRows = (await replicaRows(sql, z)).filter((row) => row.created_at.getTime() >= burstSentAt - 1000);
  const wake = wakeRows[0];
  const wakeEvent = (await scaleEvents(sql, z)).find((event) => event.scale.reason === 'request' && event.created_at.getTime() >= burstSentAt - 1000);
  const coldLaunches = (await simulatorState()).launches;
  const coldLaunch = wake ? coldLaunches.find((l) => l.model_uid === wake.engine_model_uid) : undefined;
  const cold = {
    firstByteMs: firstByte,
    lastByteMs: lastByte,
    served: served.length,
    refused503: burst.filter(refusedAsDocumented).length,
    bad: badBurst.length,
    wokenMs: wakeEvent ? wakeEvent.created_at.getTime() - burstSentAt : NaN,
    bookedMs: wake ? wake.created_at.getTime() - burstSentAt : NaN,
    engineLaunchMs: coldLaunch ? Date.parse(coldLaunch.at) - burstSentAt : NaN,
    readyMs: wake?.ready_at ? wake.ready_at.getTime() - burstSentAt : NaN,
    failures: badBurst.slice(0, 5).map((answer) => `${answer.status}: ${answer.error ?? ''}`),
  };
  step(
    `cold start: first byte ${ms(cold.firstByteMs)}, last ${ms(cold.lastByteMs)} after the burst; ${cold.served} answered in full, ${cold.refused503} refused 503 deployment_not_running, ${cold.bad} other; ` +
      `woken ${at(cold.wokenMs, 0)}, replica booked ${at(cold.bookedMs, 0)}, engine launch ${at(cold.engineLaunchMs, 0)}, ready ${at(cold.readyMs, 0)}`,
  );
  for (const failure of cold.failures) out(`    ${failure}`);

  // 4. Idle: Z back at zero after the idle time and the drain; its GPU seconds then and a window later.
  const lastAnswerAt = Math.max(...burst.map((answer) => answer.endedAt));
  const zeroSeen = await untilDeployment(owners.z, z, 'back at zero', atZero, 60_000, service, 100);
  await waitUntil("Z's replicas stopped", async () => (await replicaRows(sql, z)).every((row) => row.status === 'stopped'), 60_000, service);
  const idleRows = await replicaRows(sql, z);
  const lastReplica = idleRows.at(-1);
  const idleEvent = (await scaleEvents(sql, z)).filter((event) => event.scale.reason === 'idle').at(-1);
  const secondsAtZero = await gpuSeconds(owners.z);
  await sleep(settings.idleWindowSeconds * 1000);
  const secondsAfter = await gpuSeconds(owners.z);
  const held = (await simulatorState()).workers.flatMap((worker) => worker.gpus).filter((gpu) => gpu.held_by.some((uid) => idleRows.some((row) => uid.startsWith(row.engine_model_uid)))).length;
  const after = await owners.z.get<Deployment>(`/api/v1/model-deployments/${z}`);
  const idle = {
    gpuSecondsAtZero: secondsAtZero,
    gpuSecondsAccrued: secondsAfter - secondsAtZero,
    windowSeconds: settings.idleWindowSeconds,
    engineGpusHeld: held,
    replicasAfter: after.replicas,
    zeroSeenMs: zeroSeen.at - lastAnswerAt,
    decidedMs: idleEvent ? idleEvent.created_at.getTime() - lastAnswerAt : NaN,
    drainingMs: lastReplica?.draining_since ? lastReplica.draining_since.getTime() - lastAnswerAt : NaN,
    stoppedMs: lastReplica?.stopped_at ? lastReplica.stopped_at.getTime() - lastAnswerAt : NaN,
    meteredUntilMs: lastReplica?.running_until ? lastReplica.running_until.getTime() - lastAnswerAt : NaN,
    /** GPU time metered past the idle time counted from the last answer: the autoscaler's decision and the drain (a whole-second meter). */
    meteredPastIdleMs: lastReplica?.running_until ? lastReplica.running_until.getTime() - (lastAnswerAt + settings.scaleToZeroSeconds * 1000) : NaN,
  };
  step(
    `idle: after the last answer, idle decided ${at(idle.decidedMs, 0)} (scale_to_zero_after_seconds ${settings.scaleToZeroSeconds}), draining ${at(idle.drainingMs, 0)}, stopped ${at(idle.stoppedMs, 0)} (metered until ${at(idle.meteredUntilMs, 0)}), GET at zero ${at(idle.zeroSeenMs, 0)}; ` +
      `GPU seconds in the usage summary ${secondsAtZero} then, ${secondsAfter} ${settings.idleWindowSeconds} s later; GPUs the engine holds for Z: ${held}; replicas ${JSON.stringify(after.replicas)}`,
  );

  engineLoads.push(await engineLoadMs(engine, probeSpec(2)));
  const engineLoad = Math.min(...engineLoads);
  step(`engine load time again after the scenarios: ${ms(engineLoads[1])}; the reference is the smaller, ${ms(engineLoad)}`);

  // Report.
  const budgets: Budget[] = [
    check('scale-up: load onset to a new replica serving', `<= engine load + 5 s = ${ms(engineLoad + SCALE_UP_SLACK_MS)}`, scaleUp.reactionMs, 'ms', (v) => v <= engineLoad + SCALE_UP_SLACK_MS),
    check('cold start: first answer beyond the engine load', `<= ${COLD_START_SLACK_MS} ms`, cold.firstByteMs - engineLoad, 'ms', (v) => v <= COLD_START_SLACK_MS),
    check(`cold start: of ${settings.burst}, neither 200 nor 503 deployment_not_running`, '0', cold.bad, 'requests', (v) => v === 0),
    check('scale-down under load: failed requests', '0', drain.failed, 'requests', (v) => v === 0),
    check(`idle at zero: GPU seconds accrued over ${settings.idleWindowSeconds} s`, '0', idle.gpuSecondsAtZero > 0 ? idle.gpuSecondsAccrued : NaN, 's', (v) => v === 0),
    check('idle at zero: GPUs held on the engine', '0', idle.engineGpusHeld, 'GPUs', (v) => v === 0),
  ];
  const table = [
    ['', 'measured'],
    ['engine load time, direct launch to serving (before / after)', `${ms(engineLoads[0])} / ${ms(engineLoads[1])}`],
    ['scale-up: scale decided (event) / replica booked / engine launch', `${at(scaleUp.decidedMs, 0)} / ${at(scaleUp.bookedMs, 0)} / ${at(scaleUp.engineLaunchMs, 0)}`],
    ['scale-up: new replica ready (row) / GET ready >= 2 / GET ready 3', `${at(scaleUp.readyMs, 0)} / ${at(scaleUp.firstGetMs, 0)} / ${at(scaleUp.allReadyGetMs, 0)}`],
    ['scale-down: draining / drained replicas stopped after the PATCH', `${at(drain.drainingSinceMs, 0)} / ${at(drain.stoppedMs, 0)}`],
    ['scale-down: in flight on each replica at the PATCH (engine)', inFlightAtPatch.join(', ')],
    ['scale-down: requests in flight meanwhile / failed / cut off on the engine', `${drain.answeredDuring} / ${drain.failed} / ${drain.abortedOnEngine}`],
    ['cold start: woken / booked / engine launch / replica ready', `${at(cold.wokenMs, 0)} / ${at(cold.bookedMs, 0)} / ${at(cold.engineLaunchMs, 0)} / ${at(cold.readyMs, 0)}`],
    [`cold start: first / last byte of ${settings.burst}`, `${at(cold.firstByteMs, 0)} / ${at(cold.lastByteMs, 0)}`],
    ['cold start: answered in full / 503 deployment_not_running / other', `${cold.served} / ${cold.refused503} / ${cold.bad}`],
    ['idle after the last answer: decided / draining / stopped / GET at zero', `${at(idle.decidedMs, 0)} / ${at(idle.drainingMs, 0)} / ${at(idle.stoppedMs, 0)} / ${at(idle.zeroSeenMs, 0)}`],
    ['idle: GPU time metered past the idle time (the decision and the drain)', ms(idle.meteredPastIdleMs)],
    [`idle: usage summary GPU seconds at zero / ${settings.idleWindowSeconds} s later`, `${idle.gpuSecondsAtZero} / ${secondsAfter}`],
  ];
  const notes = [
    `Service: \`node ${SERVICE_NODE_FLAGS.join(' ')} dist/main.js\`, ROLE=all, production settings but AUTOSCALER_INTERVAL_SECONDS=${settings.autoscalerIntervalSeconds} (the default), SCALE_DOWN_COOLDOWN_SECONDS=${settings.cooldownSeconds} (60 by default: short for the run), COLD_START_MAX_HELD_REQUESTS=${settings.coldStartMaxHeld} (above the burst), COLD_START_TIMEOUT_SECONDS=${settings.coldStartTimeoutSeconds}, REPLICA_DRAIN_TIMEOUT_SECONDS the default (600).`,
    `Engine: the cluster simulator, a model loading in ${settings.modelLoadMs} ms, a token every ${settings.tokenMs} ms. Its load time as measured: a model launched directly with the platform's engine client and the request body the service sent, its state polled every 10 ms until it serves; once before and once after the scenarios, the smaller the reference.`,
    `Scale-up: deployment A (min 1, max 3, target_concurrency ${settings.target}), ${streams} concurrent streams of ${settings.streamTokens} tokens in a closed loop from the moment the first was sent; "a new replica serving" is the first new replica's \`ready_at\` (the moment it is routed); GET polled every 50 ms beside it.`,
    `Scale-down: PATCH max_replicas 1 on A at 3 ready replicas under the same load; counted: every request in flight at any time from the PATCH until the last drained replica was stopped; a request fails unless it is answered 200 and its stream ends with a finish reason and [DONE].`,
    `Cold start: deployment Z (min 0, max 1, scale_to_zero_after_seconds ${settings.scaleToZeroSeconds}) at zero, ${settings.burst} streamed requests at once; the first answer's time to its first byte (the hold ends as a replica is ready, the simulator sends its first event at once) minus the engine's load time.`,
    `Idle: Z (its organization's only deployment) after the burst, back at zero; GPU seconds from GET /v1/billing/usage-summary (the current period's total, counted up to now for replicas still serving) at zero and ${settings.idleWindowSeconds} s later; GPUs held: the simulator's state.`,
    'Times of scale events and replica rows (decided, booked, ready, draining, stopped) are read from the database (deployment_events, deployment_replicas) as an operator would: the API shows the counts, not those times; engine launch times from the simulator\'s state. Everything runs on this one machine.',
  ];
  printReport(table, [{ title: 'Budgets (elastic deployments):', lines: [textBudgets(budgets)] }], notes);

  const head = resultHead(run, database.description);
  const json = {
    ...head,
    settings,
    figures: { engine_load_ms: engineLoads, engine_load_reference_ms: engineLoad, scale_up: scaleUp, scale_down: drain, cold_start: cold, idle },
    budgets,
  };
  writeResults(
    'scaling-',
    json,
    markdown(head, table, budgets, notes, {
      title: 'Elastic deployments benchmark: latest run',
      writtenBy: '`make bench-scaling` (bench/autoscaling.ts)',
      budgetsHeading: 'Budget (docs/performance.md, Elastic deployments)',
    }),
  );
}

process.exitCode = await benchRun(
  {
    title:
      `Elastic deployments benchmark: engine load ${settings.modelLoadMs} ms, a token every ${settings.tokenMs} ms; AUTOSCALER_INTERVAL_SECONDS=${settings.autoscalerIntervalSeconds}, ` +
      `SCALE_DOWN_COOLDOWN_SECONDS=${settings.cooldownSeconds}, COLD_START_MAX_HELD_REQUESTS=${settings.coldStartMaxHeld}, COLD_START_TIMEOUT_SECONDS=${settings.coldStartTimeoutSeconds}`,
    make: 'make bench-scaling',
    workDirPrefix: 'mds-bench-scaling-',
    keepLogs: Boolean(process.env.BENCH_KEEP_LOGS),
  },
  measure,
);
