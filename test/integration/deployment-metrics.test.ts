import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { RequestMetrics } from '../../src/inference/request-metrics.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { apiKey } from '../factories/api-keys.ts';
import { deployment, type Deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { inferenceClient } from '../helpers/inference-client.ts';
import { waitUntil } from '../helpers/net.ts';

type DeploymentMetrics = components['schemas']['DeploymentMetrics'];
type ApiKeyUsage = components['schemas']['ApiKeyUsage'];
type Point = components['schemas']['MetricPoint'];

/**
 * Request metrics end to end on the cluster simulator: traffic through the gateway (successes,
 * streams, a refusal before routing, 429s of a key's limit, a cold start refused and one waited
 * for, a scale-up), the API process's minutes flushed on demand, and the same counts read back
 * from the deployment's metrics and from each key's usage.
 */
let app: TestApp;
let owner: SignedInUser;

beforeAll(async () => {
  app = await startTestApp(
    { ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50', AUTOSCALER_INTERVAL_SECONDS: '0.2', SCALE_DOWN_COOLDOWN_SECONDS: '30' },
    { workers: true, cluster: { modelLoadMs: 300, tokenLatencyMs: 20 } },
  );
  owner = await registeredUser(app);
});
afterAll(() => app.close());

const total = (series: Point[]) => series.reduce((sum, point) => sum + (point[1] ?? 0), 0);
const peak = (series: Point[]) => Math.max(...series.map((point) => point[1] ?? 0));

async function metricsOf(id: string, query: Record<string, string> = {}): Promise<{ status: number; data?: DeploymentMetrics }> {
  const { data, response } = await owner.api.GET('/api/v1/model-deployments/{deployment_id}/metrics', { params: { path: { deployment_id: id }, query } });
  return { status: response.status, data };
}

async function usageOf(keyId: number): Promise<ApiKeyUsage> {
  const { data } = await owner.api.GET('/v1/organization/api-keys/{api_key_id}/usage', { params: { path: { api_key_id: keyId }, query: {} } });
  if (!data) throw new Error(`no usage for key ${keyId}`);
  return data;
}

async function read(id: string): Promise<Deployment> {
  const { data } = await owner.api.GET('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: id } } });
  if (!data) throw new Error(`deployment ${id} not found`);
  return data;
}

/** Waits until the deployment shows these replica counts. */
async function untilReplicas(id: string, wanted: Partial<Deployment['replicas']>): Promise<void> {
  await waitUntil(
    async () => matches(await read(id), wanted),
    `replicas ${JSON.stringify(wanted)}`,
    20_000,
  );
}
const matches = (d: Deployment, wanted: Partial<Deployment['replicas']>) => Object.entries(wanted).every(([name, count]) => d.replicas[name as keyof Deployment['replicas']] === count);

/** A chat request sent as is, its status. */
async function chat(key: string, model: string, options: { body?: Record<string, unknown>; scaleUpTimeout?: string } = {}): Promise<number> {
  const headers: Record<string, string> = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  if (options.scaleUpTimeout !== undefined) headers['x-scale-up-timeout'] = options.scaleUpTimeout;
  const response = await fetch(`${app.url}/v1/chat/completions`, { method: 'POST', headers, body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, ...options.body }) });
  await response.arrayBuffer();
  return response.status;
}

async function streamed(client: OpenAI, model: string, maxTokens: number): Promise<string | null | undefined> {
  const stream = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Tell me a long story' }], stream: true, max_tokens: maxTokens });
  let finish: string | null | undefined;
  for await (const chunk of stream) finish ??= chunk.choices[0]?.finish_reason;
  return finish;
}

/** The usage records' token totals of a deployment or a key: what the metrics' token series must add up to. */
async function meteredTokens(where: Record<string, unknown>): Promise<{ in: number; out: number }> {
  await app.container.usage.flush();
  const row = (await app.db('usage_records').where(where).sum({ in: 'prompt_tokens', out: 'completion_tokens' }).first()) as { in: string | null; out: string | null };
  return { in: Number(row.in ?? 0), out: Number(row.out ?? 0) };
}

describe('deployment metrics', () => {
  it('reads back per deployment and per key the requests driven through the gateway: outcomes, streams, holds, tokens and replicas', async () => {
    const d = await deployment(app, owner, 'running', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7, min_replicas: 0, max_replicas: 2, target_concurrency: 1, scale_to_zero_after_seconds: 1 });
    await untilReplicas(d.id, { desired: 0, ready: 0, draining: 0 });
    // Once woken it stays up for the rest of the test.
    await owner.api.PATCH('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: d.id } }, body: { scale_to_zero_after_seconds: 600 } });
    const a = await apiKey(owner, [d.id]);
    const b = await apiKey(owner, [d.id], { limits: { requests_per_minute: 1 } });

    // A cold start: refused at once (held, then 503), then waited for (held, then 200).
    expect(await chat(a.key, d.id, { scaleUpTimeout: '0' })).toBe(503);
    expect(await chat(a.key, d.id, { scaleUpTimeout: '60' })).toBe(200);
    // Plain answers, and a refusal before routing (counted for the key only).
    expect(await chat(a.key, d.id)).toBe(200);
    expect(await chat(a.key, d.id)).toBe(200);
    expect(await chat(a.key, d.id, { body: { logit_bias: { 1: 2 } } })).toBe(400);
    // Streams at a target of one per replica: the autoscaler adds the second replica.
    const client = inferenceClient(app, a.key);
    const simulator = app.simulator;
    if (!simulator) throw new Error('no simulator');
    simulator.setTokenLatencyMs(150);
    try {
      // Three streams of tokens at 150 ms for seconds: three requests in flight, more than one replica's worth.
      const load = Array.from({ length: 3 }, () => streamed(client, d.id, 30));
      await untilReplicas(d.id, { ready: 2 });
      // Each stream ended with a finish reason: none failed.
      for (const finish of await Promise.all(load)) expect(['stop', 'length']).toContain(finish);
    } finally {
      simulator.setTokenLatencyMs(20);
    }
    await app.container.scaler.sampleReplicas();
    // A key's requests per minute: one answered, two refused (after routing: counted for the deployment too).
    expect([await chat(b.key, d.id), await chat(b.key, d.id), await chat(b.key, d.id)]).toEqual([200, 429, 429]);

    const expected = { requests_2xx: 7, requests_4xx: 0, requests_5xx: 1, requests_429: 2, held_requests: 2 };
    let metrics: DeploymentMetrics | undefined;
    await waitUntil(
      async () => {
        await app.container.requestMetrics.flush();
        metrics = (await metricsOf(d.id)).data;
        return metrics !== undefined && total(metrics.series.requests_2xx) + total(metrics.series.requests_429) >= 9;
      },
      'the requests counted',
    );
    const series = (metrics as DeploymentMetrics).series;
    expect(Object.fromEntries(Object.keys(expected).map((name) => [name, total(series[name as keyof typeof expected])]))).toEqual(expected);
    const tokens = await meteredTokens({ deployment_id: d.id });
    expect(tokens.out).toBeGreaterThan(0);
    expect({ in: total(series.tokens_in), out: total(series.tokens_out) }).toEqual(tokens);
    expect(series.latency_p50_ms.some(([, value]) => typeof value === 'number' && value > 0)).toBe(true);
    expect(series.ttft_p99_ms.some(([, value]) => typeof value === 'number' && value > 0)).toBe(true);
    expect(peak(series.replicas_ready)).toBe(2);
    expect(peak(series.replicas_desired)).toBe(2);
    // One point per step in every series, at each step's start in Unix seconds.
    const steps = (Date.parse((metrics as DeploymentMetrics).end) - Date.parse((metrics as DeploymentMetrics).start)) / 60_000;
    for (const points of Object.values(series)) expect(points.map(([t]) => t)).toEqual(series.requests_2xx.map(([t]) => t));
    expect(series.requests_2xx).toHaveLength(steps);

    const usageA = (await usageOf(a.id)).series;
    expect([usageA.requests_2xx, usageA.requests_4xx, usageA.requests_5xx, usageA.requests_429, usageA.held_requests].map(total)).toEqual([6, 1, 1, 0, 2]);
    expect({ in: total(usageA.tokens_in), out: total(usageA.tokens_out) }).toEqual(await meteredTokens({ api_key_id: a.id }));
    expect(usageA.ttft_p50_ms.some(([, value]) => value !== null)).toBe(true);
    const usageB = (await usageOf(b.id)).series;
    expect([usageB.requests_2xx, usageB.requests_4xx, usageB.requests_5xx, usageB.requests_429].map(total)).toEqual([1, 0, 0, 2]);
    expect(usageB.ttft_p50_ms.every(([, value]) => value === null)).toBe(true);
  });

  it('adds what several processes wrote for the same minute, merging their sketches', async () => {
    const d = await deployment(app, owner, 'running', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 });
    const one = new RequestMetrics(app.db, app.container.log);
    const two = new RequestMetrics(app.db, app.container.log);
    const at = Date.parse('2026-12-03T09:05:30Z');
    for (let i = 1; i <= 50; i++) one.record(d.id, null, { status: 200, latencyMs: i, ttftMs: -1, tokensIn: 1, tokensOut: 2, heldMs: -1 }, at);
    for (let i = 51; i <= 100; i++) two.record(d.id, null, { status: i % 2 ? 500 : 200, latencyMs: i, ttftMs: -1, tokensIn: 1, tokensOut: 2, heldMs: -1 }, at);
    await Promise.all([one.flush(), two.flush()]);
    const { data } = await metricsOf(d.id, { start: '2026-12-03T09:00:00Z', end: '2026-12-03T10:00:00Z', step: '5m' });
    const series = (data as DeploymentMetrics).series;
    const step = Date.parse('2026-12-03T09:05:00Z') / 1000;
    const at5 = (points: Point[]) => points.find(([t]) => t === step)?.[1];
    expect([at5(series.requests_2xx), at5(series.requests_5xx), at5(series.tokens_in), at5(series.tokens_out)]).toEqual([75, 25, 100, 200]);
    // The median of 1..100 (rank 49: 50 ms) and the 99th percentile (rank 98: 99 ms), within 1 %.
    expect(Math.abs((at5(series.latency_p50_ms) as number) - 50)).toBeLessThanOrEqual(0.5);
    expect(Math.abs((at5(series.latency_p99_ms) as number) - 99)).toBeLessThanOrEqual(1);
    expect(series.requests_2xx).toHaveLength(12);
    expect(series.latency_p50_ms.filter(([, value]) => value !== null)).toHaveLength(1);
  });

  it('refuses a step the range does not allow with 422, and another owner’s deployment with 404', async () => {
    const d = await deployment(app, owner, 'running', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 });
    expect((await metricsOf(d.id, { window: '7d', step: '1m' })).status).toBe(422);
    const stranger = await registeredUser(app);
    const { response } = await stranger.api.GET('/api/v1/model-deployments/{deployment_id}/metrics', { params: { path: { deployment_id: d.id }, query: {} } });
    expect(response.status).toBe(404);
  });
});
