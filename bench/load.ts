import autocannon from 'autocannon';
import { Agent, request } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { TargetName } from './report.ts';

/** One target of the benchmark: the engine directly, or a reference pass-through or the proxy in front of it. */
export interface Target {
  name: TargetName;
  /** The process in front of the engine (none for `direct`). */
  pid?: number;
  /** Full URL of the chat-completions route. */
  url: string;
  /** Authorization (and content-type) headers. */
  headers: Record<string, string>;
  /** The `model` to ask for: the engine's model uid (directly and through the references), the deployment id through the proxy. */
  model: string;
}

export interface LoadResult {
  connections: number;
  seconds: number;
  /** 2xx answers per second. */
  requestsPerSecond: number;
  ok: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  statusCodes: Record<string, number>;
  /** Latencies of the 2xx answers, ms, full resolution (autocannon's own histogram keeps whole ms). */
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

/** `body` with the target's model, serialized once: both targets get byte-for-byte the same request but for `model`. */
export function bodyFor(target: Target, body: Record<string, unknown>): string {
  return JSON.stringify({ model: target.model, ...body });
}

/** Closed-loop load with autocannon: `connections` keep-alive connections, each sending the next request when the previous answer ends. */
export function load(target: Target, body: Record<string, unknown>, connections: number, seconds: number): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    const latencies: number[] = [];
    const instance = autocannon(
      {
        url: target.url,
        method: 'POST',
        headers: target.headers,
        body: bodyFor(target, body),
        connections,
        duration: seconds,
        timeout: 10,
      },
      (error, result) => {
        if (error) return reject(error);
        const sorted = Float64Array.from(latencies).sort();
        const statusCodes = Object.fromEntries(Object.entries(result.statusCodeStats).map(([code, stat]) => [code, stat.count]));
        resolve({
          connections,
          seconds: result.duration,
          requestsPerSecond: sorted.length / result.duration,
          ok: sorted.length,
          non2xx: result.non2xx,
          errors: result.errors,
          timeouts: result.timeouts,
          statusCodes,
          p50: percentile(sorted, 50),
          p90: percentile(sorted, 90),
          p99: percentile(sorted, 99),
          max: sorted.length ? (sorted[sorted.length - 1] as number) : NaN,
          mean: sorted.length ? sorted.reduce((sum, value) => sum + value, 0) / sorted.length : NaN,
        });
      },
    );
    instance.on('response', (_client: unknown, statusCode: number, _bytes: number, responseTime: number) => {
      if (statusCode >= 200 && statusCode < 300) latencies.push(responseTime);
    });
  });
}

export interface StreamResult {
  concurrency: number;
  seconds: number;
  streams: number;
  failed: number;
  statusCodes: Record<string, number>;
  /** Time from sending the request to the first byte of the body (the first SSE event), ms. */
  ttfbP50: number;
  ttfbP99: number;
  /** Time to the response headers, ms. */
  headersP50: number;
  /** Time to the end of the stream, ms. */
  totalP50: number;
  /** Body chunks (socket reads) per stream, median: more than one means events were relayed as they came. */
  chunksP50: number;
}

/**
 * `concurrency` streamed chat completions at a time over keep-alive connections, for `seconds` or
 * until `maxStreams` have started, whichever comes first.
 */
export async function streams(target: Target, body: Record<string, unknown>, concurrency: number, seconds: number, maxStreams: number): Promise<StreamResult> {
  const url = new URL(target.url);
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  const payload = Buffer.from(bodyFor(target, { ...body, stream: true }));
  const headers = { ...target.headers, 'content-length': String(payload.length), accept: 'text/event-stream' };
  const ttfb: number[] = [];
  const headersAt: number[] = [];
  const totals: number[] = [];
  const chunks: number[] = [];
  const statusCodes: Record<string, number> = {};
  let started = 0;
  let failed = 0;
  const began = performance.now();
  const deadline = began + seconds * 1000;

  const one = () =>
    new Promise<void>((resolve) => {
      const t0 = performance.now();
      let first = NaN;
      let reads = 0;
      const req = request(
        { host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers, agent, timeout: 10_000 },
        (res) => {
          const status = res.statusCode ?? 0;
          statusCodes[status] = (statusCodes[status] ?? 0) + 1;
          const th = performance.now() - t0;
          res.on('data', () => {
            if (reads++ === 0) first = performance.now() - t0;
          });
          res.on('end', () => {
            if (status === 200 && reads > 0) {
              ttfb.push(first);
              headersAt.push(th);
              totals.push(performance.now() - t0);
              chunks.push(reads);
            } else {
              failed++;
            }
            resolve();
          });
          res.on('error', () => {
            failed++;
            resolve();
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', () => {
        failed++;
        resolve();
      });
      req.end(payload);
    });

  const worker = async () => {
    while (performance.now() < deadline && started < maxStreams) {
      started++;
      await one();
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const elapsed = (performance.now() - began) / 1000;
  agent.destroy();
  const sorted = (values: number[]) => Float64Array.from(values).sort();
  const t = sorted(ttfb);
  return {
    concurrency,
    seconds: elapsed,
    streams: ttfb.length,
    failed,
    statusCodes,
    ttfbP50: percentile(t, 50),
    ttfbP99: percentile(t, 99),
    headersP50: percentile(sorted(headersAt), 50),
    totalP50: percentile(sorted(totals), 50),
    chunksP50: percentile(sorted(chunks), 50),
  };
}

/** Nearest-rank percentile of sorted values; NaN when there are none. */
export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))] as number;
}
