/**
 * Proxy-overhead benchmark (`make bench`): the same closed-loop load against the GPU cluster
 * simulator directly, through two reference pass-throughs and through the service's inference
 * proxy, in one run, with a fixed upstream latency, held to the budgets of DESIGN.md §4 (each
 * relative to a reference measured in the same run).
 *
 * One run:
 *  1. `make build` first (the Makefile target depends on it): the service runs as in production,
 *     `node dist/main.js`;
 *  2. a database: a fresh database on the server of DATABASE_URL (dropped afterwards), or else an
 *     embedded Postgres in a temporary directory that this process starts and stops;
 *  3. the simulator as its own process: a non-streamed answer takes BENCH_UPSTREAM_MS (20 ms,
 *     one token at 20 ms per token); a streamed one sends its first event at once, then a token
 *     every BENCH_UPSTREAM_MS;
 *  4. the service as its own process (ROLE=all, production settings: no response validation, warn
 *     logs), the simulator registered and synced with the operator CLI; a user, a running
 *     deployment and an API key scoped to it, all through the HTTP API; then the references
 *     (bench/references.ts: `raw` node:http, `express-got`), each its own process;
 *  5. idle: the service's CPU and that of its Postgres backends over BENCH_IDLE_SECONDS;
 *  6. every target once at 64 connections for BENCH_SETTLE_SECONDS, not measured (a process's
 *     first heavy load optimises its code and grows its heap: one-time costs of no repetition);
 *     then BENCH_REPETITIONS repetitions; in each, at 1 and 64 connections and with 32 streams, every
 *     target in turn, the order rotated from one load and repetition to the next: autocannon
 *     after a warm-up, CPU time (/proc/<pid>/stat) and peak RSS (/proc/<pid>/status) of the process
 *     in front of the engine over each window; the figures are medians over the repetitions, each
 *     "added" figure taken against `direct` of the same repetition;
 *  7. a second deployment created through the API: the time until a worker picks it up;
 *  8. one table, each budget met or missed, bench/results/<timestamp>.json and latest.md.
 *
 * It exits 0 whenever it could measure, budgets missed or not (benchmarks report, tests assert).
 * Every process it starts is stopped at the end, also on failure or Ctrl-C.
 *
 * Settings (environment): BENCH_SECONDS (10, per measured phase), BENCH_WARMUP_SECONDS (2),
 * BENCH_SETTLE_SECONDS (10, each target at full load once before the repetitions),
 * BENCH_STREAM_SECONDS (10), BENCH_STREAM_MAX (4000 streams per phase), BENCH_UPSTREAM_MS (20),
 * BENCH_STREAM_TOKENS (8), BENCH_REPETITIONS (3), BENCH_IDLE_SECONDS (60: one run of each per-minute schedule), BENCH_TARGETS (the
 * targets in front of the engine, default `raw,express-got,proxy`; `raw-undici` is the undici
 * client in the raw pass-through), BENCH_CPU_PROF_DIR (when set, the service runs with --cpu-prof
 * and writes its profile there on exit; summarise it with bench/cpu-profile-summary.ts),
 * BENCH_KEEP_LOGS (keep the processes' logs even on success), BENCH_METRICS (`on` by default: the
 * service runs with its Prometheus metrics listener, METRICS_PORT, scraped every
 * BENCH_SCRAPE_SECONDS (15) as Prometheus would; `off`: no listener, nothing recorded), DATABASE_URL.
 */
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { registeredUser } from './api-client.ts';
import { load, streams, type Target } from './load.ts';
import { MachineWindow, UsageWindow, cpuMs, memory } from './procfs.ts';
import { ROOT, SERVICE_NODE_FLAGS, freePort, productionServiceEnv, registerCluster, start, startService, startSimulator, waitForLine, waitUntil } from './processes.ts';
import {
  budgets,
  markdown,
  out,
  printReport,
  resultHead,
  rows,
  step,
  textBudgets,
  writeResults,
  type Idle,
  type PhaseFigures,
  type Repetition,
  type RunFigures,
  type StreamFigures,
  type TargetName,
} from './report.ts';
import { benchRun, setting, type BenchRun } from './run.ts';

const FRONTS: readonly TargetName[] = ['raw', 'raw-undici', 'express-got', 'proxy'];

function onOff(name: string, fallback: boolean): boolean {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  if (raw !== 'on' && raw !== 'off') throw new Error(`${name} must be on or off, got ${JSON.stringify(raw)}`);
  return raw === 'on';
}

function targetsSetting(): TargetName[] {
  const raw = process.env.BENCH_TARGETS || 'raw,express-got,proxy';
  const names = raw.split(',').map((name) => name.trim()).filter(Boolean);
  const unknown = names.filter((name) => !FRONTS.includes(name as TargetName));
  if (unknown.length) throw new Error(`BENCH_TARGETS: unknown ${unknown.join(', ')} (any of ${FRONTS.join(', ')})`);
  return names as TargetName[];
}

const settings = {
  seconds: setting('BENCH_SECONDS', 10, 1),
  warmupSeconds: setting('BENCH_WARMUP_SECONDS', 2, 0),
  /** Each target once at full load before the repetitions, not measured (0: none). */
  settleSeconds: setting('BENCH_SETTLE_SECONDS', 10, 0),
  /**
   * 10 s of 32 streams is about 1,950 of them, so the p99 is the ~20th slowest; with 5 s (and two
   * repetitions, whose median is their mean) one slow moment of a process decided the budget:
   * express-got's added p99 ranged 2 to 23 ms over the repetitions of one run.
   */
  streamSeconds: setting('BENCH_STREAM_SECONDS', 10, 1),
  streamMax: setting('BENCH_STREAM_MAX', 4000, 1),
  upstreamMs: setting('BENCH_UPSTREAM_MS', 20, 0),
  streamTokens: setting('BENCH_STREAM_TOKENS', 8, 1),
  /** Three: the median of two is their mean, decided by the worse one. */
  repetitions: setting('BENCH_REPETITIONS', 3, 1),
  /** A whole minute by default: the per-minute schedules (metering, usage reporting, spending alerts) each run once in it, not zero or two times by chance. */
  idleSeconds: setting('BENCH_IDLE_SECONDS', 60, 1),
  targets: targetsSetting(),
  /** `BENCH_KEY_LIMITS=off`: the proxy's API key without limits (by default it has every kind, too high to refuse). */
  keyLimits: process.env.BENCH_KEY_LIMITS !== 'off',
  /** `BENCH_METRICS=off`: the service without its metrics listener (docs/operating.md: Metrics); on by default, so the figures include them. */
  metrics: onOff('BENCH_METRICS', true),
  scrapeSeconds: setting('BENCH_SCRAPE_SECONDS', 15, 1),
  streamConcurrency: 32,
  concurrency: [1, 64] as const,
};

/** The request both targets get, but for `model`: one token, so a non-streamed answer takes one token latency. */
const CHAT_BODY = { messages: [{ role: 'user', content: 'Name one colour.' }], max_tokens: 1 };
/** Streamed: exactly `streamTokens` (the simulator's answer length, which `max_tokens` does not cut short). */
const STREAM_BODY = { ...CHAT_BODY, max_tokens: settings.streamTokens };

/**
 * CPU of the Postgres backends serving the bench database (found in pg_stat_activity, read from
 * /proc), so the proxy's database work is told apart from whatever else runs on the machine.
 */
class DatabaseCpu {
  readonly #client: pg.Client;
  readonly #database: string;

  private constructor(client: pg.Client, database: string) {
    this.#client = client;
    this.#database = database;
  }

  static async open(url: string): Promise<DatabaseCpu> {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    return new DatabaseCpu(client, new URL(url).pathname.slice(1));
  }

  /** CPU ms so far per backend pid (those this process can read). */
  async sample(): Promise<Map<number, number>> {
    const { rows } = await this.#client.query<{ pid: number }>('select pid from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()', [this.#database]);
    const out = new Map<number, number>();
    for (const { pid } of rows) {
      try {
        out.set(pid, cpuMs(pid));
      } catch {
        // Gone, or not readable.
      }
    }
    return out;
  }

  static used(start: Map<number, number>, end: Map<number, number>): number {
    let total = 0;
    for (const [pid, ms] of end) total += ms - (start.get(pid) ?? 0);
    return total;
  }

  close(): Promise<void> {
    return this.#client.end();
  }
}

let databaseCpu: DatabaseCpu | undefined;

interface Deployment {
  id: string;
  status: string;
  engine_model_uid: string | null;
  failure_stage: string | null;
  failure_reason: string | null;
}

/** When the service was spawned, and the measured proxy windows since then (seconds): where to look in its CPU profile. */
let serviceSpawnedAt = NaN;
const proxyWindows: Array<{ phase: string; from: number; to: number }> = [];

/** Runs `fn` while measuring the CPU and peak RSS of the process in front of the engine, the engine, the machine and Postgres. */
async function measured<T>(target: Target, engine: number, fn: () => Promise<T>, label: string) {
  const from = (performance.now() - serviceSpawnedAt) / 1000;
  const frontWindow = target.pid === undefined ? undefined : new UsageWindow(target.pid);
  const engineWindow = new UsageWindow(engine);
  const databaseStart = await databaseCpu?.sample();
  const machineWindow = new MachineWindow();
  const result = await fn();
  const machine = machineWindow.end();
  const databaseEnd = await databaseCpu?.sample();
  const databaseMs = databaseStart && databaseEnd ? DatabaseCpu.used(databaseStart, databaseEnd) : NaN;
  if (target.name === 'proxy') proxyWindows.push({ phase: label, from, to: (performance.now() - serviceSpawnedAt) / 1000 });
  return { result, front: frontWindow?.end(), engine: engineWindow.end(), machine: { ...machine, databaseMs } };
}

async function phase(target: Target, connections: number, engine: number, rep: number): Promise<PhaseFigures> {
  if (settings.warmupSeconds > 0) await load(target, CHAT_BODY, connections, settings.warmupSeconds);
  const { result, front, engine: engineUsage, machine } = await measured(target, engine, () => load(target, CHAT_BODY, connections, settings.seconds), `rep ${rep} c=${connections}`);
  const errors = result.non2xx + result.errors + result.timeouts;
  const cpu = front ?? engineUsage;
  out(
    `  ${target.name.padEnd(11)} c=${String(connections).padEnd(3)} ${result.requestsPerSecond.toFixed(1).padStart(8)} req/s  ` +
      `p50 ${result.p50.toFixed(2)} ms  p99 ${result.p99.toFixed(2)} ms  ` +
      `${front ? '' : 'engine '}CPU ${(cpu.cpuMs / Math.max(1, result.ok + result.non2xx)).toFixed(3)} ms/req` +
      (front ? `, peak RSS ${front.peakRssMb.toFixed(0)} MB` : '') +
      `  machine ${(machine.busy * 100).toFixed(0)}% busy` +
      (errors ? `  (${errors} non-2xx/errors: ${JSON.stringify(result.statusCodes)})` : ''),
  );
  return { load: result, front, engine: engineUsage, machine };
}

async function streamPhase(target: Target, engine: number, rep: number): Promise<StreamFigures> {
  const c = settings.streamConcurrency;
  if (settings.warmupSeconds > 0) await streams(target, STREAM_BODY, c, Math.min(1, settings.warmupSeconds), settings.streamMax);
  const { result, front, engine: engineUsage, machine } = await measured(target, engine, () => streams(target, STREAM_BODY, c, settings.streamSeconds, settings.streamMax), `rep ${rep} ${c} streams`);
  out(
    `  ${target.name.padEnd(11)} ${c} streams: ${result.streams} done, TTFB p50 ${result.ttfbP50.toFixed(2)} ms p99 ${result.ttfbP99.toFixed(2)} ms, ` +
      `total p50 ${result.totalP50.toFixed(1)} ms, ${result.chunksP50} chunks p50` +
      (front ? `, CPU ${(front.cpuMs / Math.max(1, result.streams)).toFixed(3)} ms/stream` : '') +
      (result.failed ? ` (${result.failed} failed: ${JSON.stringify(result.statusCodes)})` : ''),
  );
  return { result, front, engine: engineUsage, machine };
}

/** `items` rotated left by `by`: each target goes first in turn, so none always runs on a warmer or busier machine. */
function rotated<T>(items: readonly T[], by: number): T[] {
  const shift = items.length ? by % items.length : 0;
  return [...items.slice(shift), ...items.slice(0, shift)];
}

/** CPU of the service and of its Postgres backends while nothing calls it. */
async function idleCost(servicePid: number): Promise<Idle> {
  const cpuFrom = cpuMs(servicePid);
  const databaseFrom = await databaseCpu?.sample();
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, settings.idleSeconds * 1000));
  const seconds = (performance.now() - started) / 1000;
  const databaseTo = await databaseCpu?.sample();
  const databaseMs = databaseFrom && databaseTo ? DatabaseCpu.used(databaseFrom, databaseTo) : NaN;
  return {
    seconds,
    serviceCpuMsPerSecond: (cpuMs(servicePid) - cpuFrom) / seconds,
    databaseCpuMsPerSecond: databaseMs / seconds,
    serviceRssMb: memory(servicePid).rssMb,
  };
}

/**
 * Prometheus's part: the service's /metrics scraped every `seconds` from its start to the report,
 * so its cost (the exposition, the queue and deployment counts read from Postgres) is in the figures.
 */
class Scraper {
  readonly #url: string;
  readonly #timer: NodeJS.Timeout;
  #scrapes = 0;
  #failed = 0;
  #last = '';
  #lastMs = 0;
  #running: Promise<void> = Promise.resolve();
  #finished: Promise<ScrapeSummary> | undefined;

  constructor(url: string, seconds: number) {
    this.#url = url;
    this.#timer = setInterval(() => {
      this.#running = this.#running.then(() => this.#scrape());
    }, seconds * 1000);
  }

  async #scrape(): Promise<void> {
    const started = performance.now();
    try {
      const response = await fetch(this.#url, { signal: AbortSignal.timeout(10_000) });
      const text = await response.text();
      if (!response.ok) throw new Error(`answered ${response.status}`);
      this.#scrapes += 1;
      this.#last = text;
      this.#lastMs = performance.now() - started;
    } catch {
      this.#failed += 1;
    }
  }

  /** Stops scraping after one last scrape; what the scrapes saw. */
  finish(): Promise<ScrapeSummary> {
    this.#finished ??= (async () => {
      clearInterval(this.#timer);
      await this.#running;
      await this.#scrape();
      const lines = this.#last.split('\n').filter((line) => line && !line.startsWith('#'));
      const relays = lines
        .filter((line) => line.startsWith('mds_inference_upstream_latency_seconds_count'))
        .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0);
      return { scrapes: this.#scrapes, failed: this.#failed, bytes: this.#last.length, lastMs: this.#lastMs, series: lines.length, relays };
    })();
    return this.#finished;
  }
}

interface ScrapeSummary {
  scrapes: number;
  failed: number;
  bytes: number;
  lastMs: number;
  series: number;
  /** Relays the service measured (upstream latency counts): the proxy requests of the whole run. */
  relays: number;
}

/** One request, to check a target answers a completion before loading it. */
async function probe(target: Target, stream = false): Promise<{ status: number; body: string }> {
  const response = await fetch(target.url, {
    method: 'POST',
    headers: target.headers,
    body: JSON.stringify({ model: target.model, ...(stream ? { ...STREAM_BODY, stream: true } : CHAT_BODY) }),
    signal: AbortSignal.timeout(10_000),
  });
  return { status: response.status, body: await response.text() };
}

async function measure(run: BenchRun): Promise<void> {
  // 1. Database.
  const database = await run.openDatabase({ prefix: 'mds_bench' });
  step(database.description);
  databaseCpu = await DatabaseCpu.open(database.url);
  run.atEnd(async () => {
    await databaseCpu?.close();
    databaseCpu = undefined;
  });

  // 2. The simulator, its own process.
  const simulator = await startSimulator(run.logs, {
    gpuCount: 4,
    modelLoadMs: 50,
    // Answers of `streamTokens` tokens; a non-streamed request asks for one (`max_tokens`).
    completionTokens: settings.streamTokens,
    tokenLatencyMs: settings.upstreamMs,
  });
  step(`simulator (pid ${simulator.process.pid}) at ${simulator.url}`);

  // 3. The service, its own process, and its set-up through the operator CLI and the HTTP API.
  const { env: serviceEnv, base } = await productionServiceEnv({ databaseUrl: database.url, role: 'all' });
  serviceEnv.READINESS_POLL_SECONDS = '0.2';
  const metricsUrl = settings.metrics ? `http://127.0.0.1:${await freePort()}/metrics` : undefined;
  if (metricsUrl) {
    serviceEnv.METRICS_PORT = new URL(metricsUrl).port;
    serviceEnv.METRICS_HOST = '127.0.0.1';
  }
  const profileDir = process.env.BENCH_CPU_PROF_DIR;
  if (profileDir) {
    mkdirSync(profileDir, { recursive: true });
    serviceEnv.NODE_OPTIONS = `${process.env.NODE_OPTIONS ?? ''} --cpu-prof --cpu-prof-dir=${path.resolve(profileDir)}`.trim();
  }
  serviceSpawnedAt = performance.now();
  const service = await startService(run.logs, { env: serviceEnv, base });
  step(`service (pid ${service.pid}) at ${base}${profileDir ? `, CPU profile to ${profileDir}` : ''}${metricsUrl ? `, metrics at ${metricsUrl}` : ', metrics off'}`);
  const scraper = metricsUrl ? new Scraper(metricsUrl, settings.scrapeSeconds) : undefined;
  if (scraper) run.atEnd(() => scraper.finish());
  for (const line of await registerCluster(run.logs, serviceEnv, simulator)) step(line);

  const users = new pg.Client({ connectionString: database.url });
  await users.connect();
  const api = await registeredUser(base, users, `bench-${Date.now()}@example.com`, 'Benchmark').finally(() => users.end());
  let deployment = await api.post<Deployment>('/api/v1/model-deployments', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 });
  const deploymentId = deployment.id;
  await waitUntil(
    `deployment ${deploymentId} to be running`,
    async () => {
      deployment = await api.get<Deployment>(`/api/v1/model-deployments/${deploymentId}`);
      if (deployment.status === 'failed') throw new Error(`deployment failed at ${deployment.failure_stage}: ${deployment.failure_reason}`);
      return deployment.status === 'running';
    },
    60_000,
    service,
  ).catch((error: unknown) => {
    throw new Error(`${error instanceof Error ? error.message : String(error)} (last status ${deployment.status})`);
  });
  const engineModel = deployment.engine_model_uid;
  if (!engineModel) throw new Error(`deployment ${deploymentId} is running without an engine model uid`);
  step(`deployment ${deploymentId} running as ${engineModel} on the engine`);

  const direct: Target = {
    name: 'direct',
    url: `${simulator.url}/v1/chat/completions`,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${simulator.apiKey}` },
    model: engineModel,
  };
  const check = await probe(direct);
  if (check.status !== 200) throw new Error(`the simulator answered ${check.status}: ${check.body}`);

  // The API key and a first call through the proxy, then the references in front of the same engine.
  // With limits on (the default), every proxied request is admitted and announced by the key limiter.
  const limits = settings.keyLimits ? { requests_per_minute: 1_000_000, tokens_per_minute: 1_000_000_000, monthly_token_budget: 1_000_000_000_000, monthly_spend_budget: '1000000.00' } : undefined;
  const created = await api.post<{ key: string }>('/v1/organization/api-keys', { name: 'benchmark', deployment_ids: [deploymentId], ...(limits ? { limits } : {}) });
  const fronts: Target[] = [];
  for (const name of settings.targets) {
    if (name === 'proxy') {
      fronts.push({ name, pid: service.pid, url: `${base}/v1/chat/completions`, headers: { 'content-type': 'application/json', authorization: `Bearer ${created.key}` }, model: deploymentId });
      continue;
    }
    const reference = start(name, ['bench/references.ts', name, '--upstream', simulator.url], { cwd: ROOT, env: { ...process.env }, logPath: path.join(run.logs, `${name}.log`) });
    const url = (await waitForLine(reference, /^(http:\/\/\S+)$/m, 15_000))[1] as string;
    fronts.push({ ...direct, name, pid: reference.pid, url: `${url}/v1/chat/completions` });
  }
  for (const target of fronts) {
    for (const stream of [false, true]) {
      const answer = await probe(target, stream);
      if (answer.status !== 200) throw new Error(`${target.name} answered ${answer.status}${stream ? ' to a streamed request' : ''}: ${answer.body.slice(0, 500)}`);
    }
  }
  step(`API key created (${settings.keyLimits ? 'with every kind of limit, none reached' : 'without limits'}); ${fronts.map((target) => `${target.name}${target.pid ? ` (pid ${target.pid})` : ''}`).join(', ')} answer`);

  // 5. Idle, once the start-up work has settled.
  const idleMemory = memory(service.pid);
  let idle: Idle | undefined;
  if (settings.targets.includes('proxy')) {
    await new Promise((resolve) => setTimeout(resolve, 3000));
    idle = await idleCost(service.pid);
    step(`idle ${idle.seconds.toFixed(0)} s, ROLE=all: service ${idle.serviceCpuMsPerSecond.toFixed(1)} ms CPU/s, its Postgres backends ${idle.databaseCpuMsPerSecond.toFixed(1)} ms CPU/s`);
  }

  // 6. Load, every target in turn, rotated; first each once at full load, not measured: the
  // one-time costs of a process's first heavy load (code optimised, heap grown to the load's
  // working size) belong to no repetition, as they would not in a process serving for a while.
  const targets = [direct, ...fronts];
  const full = Math.max(...settings.concurrency);
  if (settings.settleSeconds > 0) {
    step(`settling: every target at ${full} connections for ${settings.settleSeconds} s, not measured`);
    for (const target of targets) await load(target, CHAT_BODY, full, settings.settleSeconds);
  }
  const repetitions: Repetition[] = [];
  for (let rep = 1; rep <= settings.repetitions; rep++) {
    const figures: Repetition = { c1: {}, c64: {}, stream: {} };
    for (const [index, connections] of settings.concurrency.entries()) {
      step(`repetition ${rep}/${settings.repetitions}: ${connections} connection${connections > 1 ? 's' : ''}, ${settings.seconds} s each`);
      for (const target of rotated(targets, rep - 1 + index)) figures[connections === 1 ? 'c1' : 'c64'][target.name] = await phase(target, connections, simulator.process.pid, rep);
    }
    step(`repetition ${rep}/${settings.repetitions}: ${settings.streamConcurrency} concurrent streams of ${settings.streamTokens} tokens, ${settings.streamSeconds} s each`);
    for (const target of rotated(targets, rep + 1)) figures.stream[target.name] = await streamPhase(target, simulator.process.pid, rep);
    repetitions.push(figures);
  }

  // 7. How soon a worker picks up a new deployment (NOTIFY, not polling).
  let pickupMs: number | undefined;
  if (settings.targets.includes('proxy')) {
    const asked = performance.now();
    const second = await api.post<Deployment>('/api/v1/model-deployments', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 });
    const answeredAt = performance.now();
    await waitUntil('the second deployment to leave requested', async () => (await api.get<Deployment>(`/api/v1/model-deployments/${second.id}`)).status !== 'requested', 10_000, service, 20);
    pickupMs = performance.now() - answeredAt;
    step(`a requested deployment was picked up ${pickupMs.toFixed(0)} ms after the API answered (${(answeredAt - asked).toFixed(0)} ms to answer)`);
  }

  // 8. Report.
  const scrapes = await scraper?.finish();
  if (scrapes) step(`metrics: ${scrapes.scrapes} scrapes (${scrapes.failed} failed), the last ${(scrapes.bytes / 1024).toFixed(0)} KB in ${scrapes.lastMs.toFixed(1)} ms, ${scrapes.series} series; ${scrapes.relays} relays measured`);
  const figures: RunFigures = { targets: targets.map((target) => target.name), repetitions, idle, pickupMs };
  const list = budgets(figures);
  const table = rows(figures);
  const notes = [
    `Upstream: the cluster simulator, ${settings.upstreamMs} ms per non-streamed answer; streams send their first event at once, then ${settings.streamTokens} tokens ${settings.upstreamMs} ms apart.`,
    `Load: autocannon, closed loop, ${settings.settleSeconds} s of each target at ${full} connections first (not measured), then ${settings.seconds} s per phase after ${settings.warmupSeconds} s of warm-up, ${settings.repetitions} repetitions with the targets' order rotated; medians over the repetitions, each added figure against \`direct\` of the same repetition. Latencies are of 2xx answers, at full resolution. Load generator, engine, targets and Postgres share the machine.`,
    `Targets: raw = node:http server and keep-alive client, .pipe(); express-got = Express 5 + express.json + got.stream + stream/promises pipeline; proxy = the service (\`node ${SERVICE_NODE_FLAGS.join(' ')} dist/main.js\`, as \`npm start\`, ROLE=all, key authentication${settings.keyLimits ? ' with every kind of key limit (none reached: admitted, counted and announced in x-ratelimit headers)' : ''}, routing, usage records). CPU per request: utime + stime of the process in front of the engine over the phase divided by the answers (direct: the engine's). Peak RSS: VmHWM (reset at the start of each phase when allowed) and VmRSS sampled every 100 ms, highest of any phase; before the load the service held ${idleMemory.rssMb.toFixed(0)} MB.`,
    `Streams: time to the first body byte, ${settings.streamConcurrency} at a time over keep-alive connections.`,
    settings.metrics
      ? `Metrics: on (the service's Prometheus listener, METRICS_PORT), scraped every ${settings.scrapeSeconds} s during the run${scrapes ? ` (${scrapes.scrapes} scrapes of ${(scrapes.bytes / 1024).toFixed(0)} KB, ${scrapes.series} series)` : ''}.`
      : 'Metrics: off (BENCH_METRICS=off: no listener, nothing recorded).',
    ...(idle ? [`Idle: ${idle.seconds.toFixed(0)} s without requests after 3 s of settling: the service process and the Postgres backends of its database (pg_stat_activity), ROLE=all.`] : []),
    ...(pickupMs !== undefined ? ["Pick-up: from the API's answer to POST /api/v1/model-deployments to the first GET that no longer reads `requested` (polled every 20 ms)."] : []),
  ];
  printReport(table, [{ title: 'Budgets (DESIGN.md §4):', lines: [textBudgets(list)] }], notes);

  const head = resultHead(run, database.description);
  const json = {
    ...head,
    settings: { ...settings, chat_body: CHAT_BODY, stream_body: STREAM_BODY },
    ...(scrapes ? { metrics_scrapes: scrapes } : {}),
    service_rss_mb_before_load: idleMemory.rssMb,
    ...(profileDir ? { cpu_profile: { dir: profileDir, proxy_windows_s_since_service_start: proxyWindows } } : {}),
    figures,
    budgets: list,
  };
  writeResults('', json, markdown(head, table, list, notes));
  if (profileDir) {
    out(`The service writes its CPU profile to ${profileDir} as it stops. The measured proxy windows, in seconds since it started:`);
    for (const w of proxyWindows) out(`  ${w.phase.padEnd(18)} --from ${w.from.toFixed(1)} --to ${w.to.toFixed(1)}`);
    out(`  e.g. node bench/cpu-profile-summary.ts ${profileDir}/<file>.cpuprofile --from ${proxyWindows[1]?.from.toFixed(1) ?? 0} --to ${proxyWindows[1]?.to.toFixed(1) ?? ''}`);
  }
}

process.exitCode = await benchRun(
  {
    title: `Proxy overhead benchmark: ${settings.upstreamMs} ms upstream, ${settings.seconds} s per phase (+${settings.warmupSeconds} s warm-up), connections ${settings.concurrency.join(' and ')}, ${settings.streamConcurrency} streams`,
    make: 'make bench',
    workDirPrefix: 'mds-bench-',
    keepLogs: Boolean(process.env.BENCH_KEEP_LOGS),
  },
  measure,
);
