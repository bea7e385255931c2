import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { ACTIVE_STATUSES } from '../../src/deployments/deployment-states.ts';
import { jobDefinitions } from '../../src/container.ts';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment, type Deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { inferenceClient } from '../helpers/inference-client.ts';
import { waitUntil } from '../helpers/net.ts';

/**
 * Prometheus metrics: `/metrics` on a listener of its own (METRICS_PORT, here
 * `0`), scraped over real HTTP and read in the text format, after real management requests, an
 * inference call relayed to the cluster simulator, an email sent to the SMTP listener and webhook
 * deliveries to a receiver on loopback. The public API port never answers it.
 */
interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus text exposition (version 0.0.4). */
function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, name, value] of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[name as string] = value as string;
    samples.push({ name: match[1] as string, labels, value: Number(match[3]) });
  }
  return samples;
}

class Scrape {
  readonly text: string;
  readonly samples: Sample[];

  constructor(text: string, samples: Sample[]) {
    this.text = text;
    this.samples = samples;
  }

  /** The samples of `name` whose labels include `labels`. */
  all(name: string, labels: Record<string, string> = {}): Sample[] {
    return this.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  }

  /** The sum of those samples (0 when there are none). */
  value(name: string, labels: Record<string, string> = {}): number {
    return this.all(name, labels).reduce((sum, s) => sum + s.value, 0);
  }
}

let app: TestApp;
let owner: SignedInUser;
let chat: Deployment;
let key: string;

async function scrape(): Promise<Scrape> {
  const response = await fetch(`${app.metricsUrl}/metrics`);
  expect(response.status).toBe(200);
  const text = await response.text();
  return new Scrape(text, parseExposition(text));
}

/** Scrapes until `probe` holds (the measures of work done in the background arrive when it ends). */
async function scrapeUntil(probe: (scrape: Scrape) => boolean, what: string): Promise<Scrape> {
  let last: Scrape | undefined;
  await waitUntil(async () => probe((last = await scrape())), what, 20_000);
  return last as Scrape;
}

const HTTP = 'mds_http_request_duration_seconds_count';

beforeAll(async () => {
  app = await startTestApp(
    { ...FAST_PROVISIONING, METRICS_PORT: '0', MAX_ACTIVE_RESOURCES: '20', WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_RETRY_DELAY_SECONDS: '1', WEBHOOK_RETRY_LIMIT: '1' },
    { workers: true, cluster: { modelLoadMs: 20, tokenLatencyMs: 2 } },
  );
  owner = await registeredUser(app);
  chat = await deployment(app, owner, 'running', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 });
  key = (await apiKey(owner, [chat.id])).key;
}, 60_000);
afterAll(() => app?.close());

describe('the metrics listener', () => {
  it('serves /metrics in the Prometheus text format on its own port, with the Node process metrics', async () => {
    expect(app.metricsUrl).toBeDefined();
    expect(new URL(app.metricsUrl ?? '').port).not.toBe(new URL(app.url).port);
    const response = await fetch(`${app.metricsUrl}/metrics`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
    const text = await response.text();
    expect(text).toContain('# TYPE mds_http_request_duration_seconds histogram');
    expect(text).toContain('# TYPE process_cpu_user_seconds_total counter');
    const samples = new Scrape(text, parseExposition(text));
    expect(samples.value('process_resident_memory_bytes')).toBeGreaterThan(0);
    expect(samples.all('nodejs_eventloop_lag_seconds')).toHaveLength(1);
  });

  it('answers 404 on any other path and 405 to another method', async () => {
    expect((await fetch(`${app.metricsUrl}/`)).status).toBe(404);
    expect((await fetch(`${app.metricsUrl}/metrics/x`)).status).toBe(404);
    const post = await fetch(`${app.metricsUrl}/metrics`, { method: 'POST' });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD');
  });

  it('is never served by the public API port: /metrics there is 404, counted as unmatched', async () => {
    const before = (await scrape()).value(HTTP, { operation_id: 'unmatched', status: '404' });
    const response = await fetch(`${app.url}/metrics`);
    expect(response.status).toBe(404);
    expect(await response.text()).not.toContain('mds_');
    await scrapeUntil((s) => s.value(HTTP, { operation_id: 'unmatched', status: '404' }) === before + 1, 'the 404 counted');
  });
});

describe('HTTP requests', () => {
  it('are counted by operationId and status, with latency buckets, never by URL', async () => {
    const before = await scrape();
    const ok = { operation_id: 'getOrganization', status: '200' };
    const missing = { operation_id: 'getDeployment', status: '404' };
    for (let i = 0; i < 3; i++) expect((await owner.api.GET('/v1/organization')).response.status).toBe(200);
    const unknown = randomUUID();
    const { response } = await owner.api.GET('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: unknown } } });
    expect(response.status).toBe(404);

    const after = await scrapeUntil(
      (s) => s.value(HTTP, ok) === before.value(HTTP, ok) + 3 && s.value(HTTP, missing) === before.value(HTTP, missing) + 1,
      'three 200 and one 404 counted',
    );
    // Cumulative buckets: the +Inf bucket is the count; the sum is a duration.
    expect(after.value('mds_http_request_duration_seconds_bucket', { ...ok, le: '+Inf' })).toBe(after.value(HTTP, ok));
    expect(after.value('mds_http_request_duration_seconds_sum', ok)).toBeGreaterThan(0);
    expect(after.all('mds_http_request_duration_seconds_bucket', ok).map((s) => s.labels.le)).toContain('0.005');
    // Bounded labels: the path's id is nowhere.
    expect(after.text).not.toContain(unknown);
    const operations = new Set(after.all(HTTP).map((s) => s.labels.operation_id));
    expect([...operations].every((id) => id === 'unmatched' || /^[a-z][A-Za-z]+$/.test(id ?? ''))).toBe(true);
  });
});

describe('the inference proxy', () => {
  it('measures upstream latency, time to first chunk and active streams per route, and counts the calls', async () => {
    const route = { route: '/v1/chat/completions' };
    const call = { operation_id: 'createChatCompletion', status: '200' };
    const before = await scrape();
    const client = inferenceClient(app, key);
    const answer = await client.chat.completions.create({ model: chat.id, messages: [{ role: 'user', content: 'Say hello' }] });
    expect(answer.choices[0]?.message.content).toEqual(expect.any(String));
    const stream = await client.chat.completions.create({ model: chat.id, messages: [{ role: 'user', content: 'Tell me a story' }], stream: true, max_tokens: 4 });
    for await (const chunk of stream) expect(chunk.object).toBe('chat.completion.chunk');

    // Usage is journaled as answers end and stored in the next batch (within a second): written now.
    await app.container.usage.flush();
    const after = await scrapeUntil((s) => s.value(HTTP, call) === before.value(HTTP, call) + 2, 'two chat completions counted');
    expect(after.value('mds_inference_upstream_latency_seconds_count', route) - before.value('mds_inference_upstream_latency_seconds_count', route)).toBe(2);
    expect(after.value('mds_inference_time_to_first_chunk_seconds_count', route) - before.value('mds_inference_time_to_first_chunk_seconds_count', route)).toBe(2);
    // Each answer's first chunk comes after its headers.
    const added = (name: string) => after.value(name, route) - before.value(name, route);
    expect(added('mds_inference_time_to_first_chunk_seconds_sum')).toBeGreaterThanOrEqual(added('mds_inference_upstream_latency_seconds_sum'));
    expect(after.all('mds_inference_active_streams', route)).toEqual([{ name: 'mds_inference_active_streams', labels: route, value: 0 }]);
    // Usage of both answers was written in batches.
    expect(after.value('mds_usage_records_total', { outcome: 'written' }) - before.value('mds_usage_records_total', { outcome: 'written' })).toBeGreaterThanOrEqual(2);
    expect(after.value('mds_usage_flushes_total', { outcome: 'written' })).toBeGreaterThan(before.value('mds_usage_flushes_total', { outcome: 'written' }));
    expect(after.value('mds_usage_flush_duration_seconds_count')).toBeGreaterThan(0);
    expect(after.all('mds_usage_records_waiting')).toHaveLength(1);
  });

  it('counts a stream while it is open', async () => {
    const route = { route: '/v1/chat/completions' };
    const stream = await inferenceClient(app, key).chat.completions.create({ model: chat.id, messages: [{ role: 'user', content: 'Tell me a long story' }], stream: true, max_tokens: 200 });
    const chunks = stream[Symbol.asyncIterator]();
    await chunks.next();
    expect((await scrape()).value('mds_inference_active_streams', route)).toBe(1);
    stream.controller.abort();
    await scrapeUntil((s) => s.value('mds_inference_active_streams', route) === 0, 'the stream closed');
  });
});

describe('background work', () => {
  it('reports the depth of every job queue by state', async () => {
    const s = await scrape();
    for (const { queue } of jobDefinitions(app.container)) {
      for (const state of ['ready', 'deferred', 'active', 'failed']) {
        expect(s.all('mds_job_queue_jobs', { queue, state }), `${queue} ${state}`).toHaveLength(1);
      }
    }
  });

  it('reports the deployments by status as Postgres counts them', async () => {
    const counts = async () => {
      const rows = (await app.db('deployments').whereIn('status', ACTIVE_STATUSES).groupBy('status').select('status').count({ count: '*' })) as Array<{ status: string; count: string }>;
      return Object.fromEntries(ACTIVE_STATUSES.map((status) => [status, Number(rows.find((row) => row.status === status)?.count ?? 0)]));
    };
    // Nothing moves a deployment meanwhile; the scrape's counts are at most 5 s old.
    const expected = await counts();
    const s = await scrapeUntil(
      (scraped) => ACTIVE_STATUSES.every((status) => scraped.value('mds_deployments', { status }) === expected[status]),
      `the counts ${JSON.stringify(expected)}`,
    );
    expect(s.value('mds_deployments', { status: 'running' })).toBeGreaterThanOrEqual(1);
    expect(s.all('mds_deployments').map((sample) => sample.labels.status).sort()).toEqual([...ACTIVE_STATUSES].sort());
  });

  it('counts an email sent by its template, and the run of its job', async () => {
    const before = await scrape();
    const sent = { template: 'email_verification', outcome: 'sent' };
    const someone = await registeredUser(app);
    await app.inbox.next(someone.email, { subject: 'Confirm your email address' });
    const completed = { queue: 'send-email', outcome: 'completed' };
    // The job's run ends once the email is recorded as sent, just after the SMTP server accepted it.
    const after = await scrapeUntil(
      (s) => s.value('mds_emails_total', sent) === before.value('mds_emails_total', sent) + 1 && s.value('mds_job_runs_total', completed) > before.value('mds_job_runs_total', completed),
      'the email and its job run counted',
    );
    expect(after.value('mds_job_duration_seconds_count', { queue: 'send-email' })).toBeGreaterThan(0);
  });

  it('counts webhook attempts by outcome, a failed one as a job run to retry', async () => {
    const received: number[] = [];
    const answers = [503];
    const receiver: Server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const status = answers.shift() ?? 204;
        received.push(status);
        res.writeHead(status).end();
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    try {
      const address = receiver.address();
      const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/hooks`;
      const before = await scrape();
      const { data } = await owner.api.POST('/v1/organization/webhook-endpoints', { body: { url, event_types: ['deployment.status_changed'] } });
      if (!data) throw new Error('no endpoint');
      const { response } = await owner.api.POST('/v1/organization/webhook-endpoints/{webhook_endpoint_id}/test', { params: { path: { webhook_endpoint_id: data.endpoint.id } } });
      expect(response.status).toBe(202);
      const moved = (s: Scrape, outcome: string) => s.value('mds_webhook_attempts_total', { outcome }) - before.value('mds_webhook_attempts_total', { outcome });
      const after = await scrapeUntil((s) => moved(s, 'retrying') === 1 && moved(s, 'succeeded') === 1, 'a failed attempt, then a delivered one');
      expect(received).toEqual([503, 204]);
      expect(moved(after, 'failed')).toBe(0);
      const runs = (s: Scrape, outcome: string) => s.value('mds_job_runs_total', { queue: 'deliver-webhook', outcome });
      expect(runs(after, 'retrying') - runs(before, 'retrying')).toBe(1);
      expect(runs(after, 'completed') - runs(before, 'completed')).toBe(1);
      expect(after.value('mds_webhook_attempt_duration_seconds_count') - before.value('mds_webhook_attempt_duration_seconds_count')).toBe(2);
    } finally {
      receiver.closeAllConnections();
      await new Promise<void>((resolve) => receiver.close(() => resolve()));
    }
  });
});

describe('a worker process (ROLE=worker)', () => {
  it('serves its own /metrics with the queues and deployments, and no HTTP API', async () => {
    const worker = await startTestApp({ METRICS_PORT: '0', ROLE: 'worker' });
    try {
      const text = await (await fetch(`${worker.metricsUrl}/metrics`)).text();
      const samples = new Scrape(text, parseExposition(text));
      expect(samples.all('mds_job_queue_jobs', { queue: 'send-email', state: 'ready' })).toHaveLength(1);
      expect(samples.all('mds_deployments')).toHaveLength(ACTIVE_STATUSES.length);
      expect(samples.all(HTTP)).toEqual([]);
    } finally {
      await worker.close();
    }
  });
});

describe('without METRICS_PORT', () => {
  it('starts no metrics listener and records nothing; /metrics on the API port is 404', async () => {
    const plain = await startTestApp();
    try {
      expect(plain.metricsUrl).toBeUndefined();
      expect(plain.container.metrics).toBeUndefined();
      expect((await fetch(`${plain.url}/metrics`)).status).toBe(404);
    } finally {
      await plain.close();
    }
  });
});

describe('the settings', () => {
  const test = { NODE_ENV: 'test' };

  it('are off by default and bind to loopback unless METRICS_HOST says otherwise', () => {
    expect(loadConfig(test).metrics).toBeUndefined();
    expect(loadConfig({ ...test, METRICS_PORT: '' }).metrics).toBeUndefined();
    expect(loadConfig({ ...test, METRICS_PORT: '9464' }).metrics).toEqual({ port: 9464, host: '127.0.0.1' });
    expect(loadConfig({ ...test, METRICS_PORT: '9464', METRICS_HOST: '0.0.0.0' }).metrics).toEqual({ port: 9464, host: '0.0.0.0' });
  });

  it('fail fast with a message naming the variable', () => {
    expect(() => loadConfig({ ...test, METRICS_PORT: 'metrics' })).toThrow(/METRICS_PORT/);
    expect(() => loadConfig({ ...test, METRICS_PORT: '70000' })).toThrow(/METRICS_PORT/);
    expect(() => loadConfig({ ...test, METRICS_HOST: '0.0.0.0' })).toThrow(/METRICS_HOST: set METRICS_PORT too/);
    expect(() => loadConfig({ ...test, PORT: '8080', METRICS_PORT: '8080' })).toThrow(ConfigError);
    expect(() => loadConfig({ ...test, PORT: '8080', METRICS_PORT: '8080' })).toThrow(/METRICS_PORT: must differ from PORT/);
    expect(loadConfig({ ...test, ROLE: 'worker', PORT: '8080', METRICS_PORT: '8080' }).metrics?.port).toBe(8080);
  });
});
