import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { createLogger } from '../../src/logger.ts';
import { pruneWebhookDeliveriesJob } from '../../src/webhooks/webhook-delivery.ts';
import { insertEndpoint } from '../../src/webhooks/webhooks.repository.ts';
import { SECRET_SEAL } from '../../src/webhooks/signature.ts';
import { TARGET_NOT_ALLOWED } from '../../src/webhooks/target-address.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import { addedMember } from '../factories/organizations.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { waitUntil } from '../helpers/net.ts';
import { ageWebhookDelivery } from '../helpers/time-travel.ts';

/**
 * Organization webhooks: endpoints managed by admins, every deployment event of the
 * organization POSTed to them signed per the Standard Webhooks specification, retried with backoff
 * by pg-boss, each attempt recorded, endpoints that keep failing disabled with an email, and
 * targets checked against SSRF. The receiver is a real HTTP server on loopback that verifies every
 * delivery with the `standardwebhooks` library (which needs the app to allow private targets:
 * `WEBHOOK_ALLOW_PRIVATE_TARGETS=true`); a second app without that setting shows the refusals.
 */
type WebhookEvent = components['schemas']['WebhookEvent'];
type DeploymentEvent = components['schemas']['DeploymentEvent'];

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  /** The payload as the library verified it with the receiver's secret; undefined when it refused. */
  verified: WebhookEvent | undefined;
  /** Verified with each of the secrets given, in order. */
  verifiedWith: boolean[];
  answered: number;
}

/** A webhook receiver on loopback: verifies each delivery with standardwebhooks, answers as told (204 by default). */
class Receiver {
  readonly received: Received[] = [];
  /** Statuses to answer next, first first; then `otherwise`. */
  answers: number[] = [];
  otherwise = 204;
  secrets: string[] = [];
  readonly #server: Server;
  url = '';

  constructor() {
    this.#server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        const verifiedWith = this.secrets.map((secret) => {
          try {
            new Webhook(secret).verify(body, req.headers as Record<string, string>);
            return true;
          } catch {
            return false;
          }
        });
        const status = this.answers.shift() ?? this.otherwise;
        this.received.push({ headers: req.headers, body, verified: verifiedWith[0] ? (JSON.parse(body) as WebhookEvent) : undefined, verifiedWith, answered: status });
        res.writeHead(status).end();
      });
    });
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    const address = this.#server.address();
    this.url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/hooks`;
    return this;
  }

  async stop(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  ofType(type: string): Received[] {
    return this.received.filter((r) => (JSON.parse(r.body) as WebhookEvent).type === type);
  }
}

let app: TestApp;
const receivers: Receiver[] = [];

async function receiver(): Promise<Receiver> {
  const started = await new Receiver().start();
  receivers.push(started);
  return started;
}

beforeAll(async () => {
  app = await startTestApp(
    {
      ...FAST_PROVISIONING,
      MAX_ACTIVE_RESOURCES: '50',
      WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
      WEBHOOK_RETRY_DELAY_SECONDS: '1',
      WEBHOOK_RETRY_LIMIT: '1',
      WEBHOOK_DISABLE_AFTER_FAILURES: '2',
    },
    { workers: true, cluster: { modelLoadMs: 20 } },
  );
}, 60_000);
afterAll(async () => {
  await Promise.all(receivers.map((r) => r.stop()));
  await app?.close();
});

/** An admin's new endpoint to the receiver (the secret given to the receiver). */
async function endpointFor(admin: SignedInUser, to: Receiver, body: Partial<components['schemas']['CreateWebhookEndpointRequest']> = {}) {
  const { data, response } = await admin.api.POST('/v1/organization/webhook-endpoints', { body: { url: to.url, ...body } });
  expect(response.status).toBe(201);
  if (!data) throw new Error('no endpoint');
  to.secrets = [data.secret];
  return data;
}

async function attemptsPage(admin: SignedInUser, endpointId: string) {
  const { data } = await admin.api.GET('/v1/organization/webhook-endpoints/{webhook_endpoint_id}/attempts', { params: { path: { webhook_endpoint_id: endpointId } } });
  if (!data) throw new Error('no page of attempts');
  return data;
}

async function attemptsOf(admin: SignedInUser, endpointId: string) {
  return (await attemptsPage(admin, endpointId)).items;
}

describe('webhook endpoints', () => {
  it('are created by admins with the signing secret shown once, then listed and read without it', async () => {
    const admin = await registeredUser(app);
    const to = await receiver();
    const created = await endpointFor(admin, to, { description: 'ops', event_types: ['deployment.status_changed'] });
    expect(created.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(created.endpoint).toMatchObject({ url: to.url, description: 'ops', event_types: ['deployment.status_changed'], status: 'enabled', consecutive_failures: 0 });
    const { data: list } = await admin.api.GET('/v1/organization/webhook-endpoints');
    expect(list?.items).toEqual([created.endpoint]);
    const { data: one, response } = await admin.api.GET('/v1/organization/webhook-endpoints/{webhook_endpoint_id}', { params: { path: { webhook_endpoint_id: created.endpoint.id } } });
    expect(one).toEqual(created.endpoint);
    expect(response.status).toBe(200);
    expect(JSON.stringify(list)).not.toContain(created.secret.slice(6));
    // Sealed at rest: the stored column is not the secret.
    const stored = await app.db('webhook_endpoints').where({ id: created.endpoint.id }).first('sealed_secret');
    expect(stored.sealed_secret).not.toContain(created.secret.slice(6, 20));
    expect(app.container.keyring.decrypt(SECRET_SEAL, stored.sealed_secret)).toBe(created.secret);
  });

  it('are at most 20 per organization: the 21st is refused with 422', async () => {
    const admin = await registeredUser(app);
    for (let i = 0; i < 20; i++) await admin.api.POST('/v1/organization/webhook-endpoints', { body: { url: `http://127.0.0.1:9/hooks/${i}` } });
    const { response, error } = await admin.api.POST('/v1/organization/webhook-endpoints', { body: { url: 'http://127.0.0.1:9/hooks/21' } });
    expect(response.status).toBe(422);
    expect(error?.detail).toContain('at most 20 webhook endpoints');
    expect((await admin.api.GET('/v1/organization/webhook-endpoints')).data?.items).toHaveLength(20);
  });

  it('are for admins only: a member gets 403', async () => {
    const admin = await registeredUser(app);
    const organizationId = (await admin.api.GET('/v1/organization')).data?.id ?? 0;
    const member = await addedMember(app, organizationId, 'member');
    const { response } = await member.api.GET('/v1/organization/webhook-endpoints');
    expect(response.status).toBe(403);
  });

  it('deliver every status change of the organization’s deployments, signed as Standard Webhooks says, each attempt recorded', async () => {
    const admin = await registeredUser(app);
    const to = await receiver();
    const { endpoint } = await endpointFor(admin, to, { event_types: ['deployment.status_changed'] });
    const running = await deployment(app, admin, 'running');
    await waitUntil(async () => to.received.some((r) => (r.verified?.data as DeploymentEvent | undefined)?.to_status === 'running'), 'the running event at the receiver');
    expect(to.received.every((r) => r.verified !== undefined)).toBe(true);
    const events = to.received.map((r) => r.verified?.data as DeploymentEvent);
    // Deliveries are not ordered; by id they are the log's status changes (no progress steps: not subscribed).
    const log = await app.db('deployment_events').where({ deployment_id: running.id, type: 'deployment.status_changed' }).orderBy('id').select('id', 'to_status');
    expect(events.map((e) => e.id).sort((a, b) => a - b)).toEqual(log.map((row: { id: string }) => Number(row.id)));
    expect(events.find((e) => e.to_status === 'provisioning')).toMatchObject({ type: 'deployment.status_changed', deployment_id: running.id, from_status: 'requested' });
    const first = to.received[0];
    expect(first?.headers['content-type']).toBe('application/json');
    expect(first?.headers['webhook-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(Number(first?.headers['webhook-timestamp'])).toBeGreaterThan(Date.now() / 1000 - 60);
    expect(first?.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
    expect(first?.verified).toMatchObject({ type: 'deployment.status_changed' });
    expect(new Set(to.received.map((r) => r.headers['webhook-id'])).size).toBe(to.received.length);
    const attempts = await attemptsOf(admin, endpoint.id);
    expect(attempts).toHaveLength(to.received.length);
    expect(attempts.every((a) => a.outcome === 'succeeded' && a.response_status === 204 && a.error === null && a.attempt === 1 && a.duration_ms >= 0)).toBe(true);
    expect(attempts.map((a) => a.delivery_id).sort()).toEqual(to.received.map((r) => r.headers['webhook-id']).sort());
  });

  it('send a test event on request: queued, then POSTed as the body the answer showed', async () => {
    const admin = await registeredUser(app);
    const to = await receiver();
    const { endpoint } = await endpointFor(admin, to);
    const { data: sent, response } = await admin.api.POST('/v1/organization/webhook-endpoints/{webhook_endpoint_id}/test', { params: { path: { webhook_endpoint_id: endpoint.id } } });
    expect(response.status).toBe(202);
    expect(sent?.delivery).toMatchObject({ webhook_endpoint_id: endpoint.id, event_type: 'webhook.test', event_id: null, status: 'pending', attempts: 0 });
    await waitUntil(async () => to.received.length === 1, 'the test event');
    expect(to.received[0]?.headers['webhook-id']).toBe(sent?.delivery.id);
    expect(to.received[0]?.verified).toEqual(sent?.payload);
    await waitUntil(async () => (await attemptsOf(admin, endpoint.id)).length === 1, 'the attempt recorded');
  });

  it('retry a failed attempt with backoff under the same webhook-id, recording each attempt', async () => {
    const admin = await registeredUser(app);
    const to = await receiver();
    to.answers = [503];
    const { endpoint } = await endpointFor(admin, to);
    await admin.api.POST('/v1/organization/webhook-endpoints/{webhook_endpoint_id}/test', { params: { path: { webhook_endpoint_id: endpoint.id } } });
    await waitUntil(async () => to.received.length === 2, 'the retry', 20_000);
    expect(to.received.map((r) => r.answered)).toEqual([503, 204]);
    expect(to.received[1]?.headers['webhook-id']).toBe(to.received[0]?.headers['webhook-id']);
    expect(to.received[1]?.body).toBe(to.received[0]?.body);
    expect(to.received.every((r) => r.verified)).toBe(true);
    await waitUntil(async () => (await attemptsOf(admin, endpoint.id)).length === 2, 'both attempts recorded');
    const [second, first] = await attemptsOf(admin, endpoint.id);
    expect(first).toMatchObject({ attempt: 1, outcome: 'failed', response_status: 503, error: 'The receiver answered 503.' });
    expect(second).toMatchObject({ attempt: 2, outcome: 'succeeded', response_status: 204, error: null });
  });

  it('are disabled when deliveries keep failing for good, and the organization’s admins are emailed; enabling again resets the count', async () => {
    const admin = await registeredUser(app);
    const to = await receiver();
    to.otherwise = 500;
    const { endpoint } = await endpointFor(admin, to, { event_types: ['deployment.status_changed'] });
    // Four status changes, each delivery failing twice (one retry here); two failed for good disable it.
    await deployment(app, admin, 'running');
    const state = async () => JSON.stringify({ endpoint: await app.db('webhook_endpoints').where({ id: endpoint.id }).first(), deliveries: await app.db('webhook_deliveries').where({ endpoint_id: endpoint.id }), received: to.received.length });
    let last = '';
    await waitUntil(async () => (last = await state()).includes('"status":"disabled"'), () => `the endpoint disabled: ${last}`, 20_000);
    const email = await app.inbox.next(admin.email, { subject: 'was disabled', timeoutMs: 10_000 });
    expect(email.text).toContain(to.url);
    expect(email.text).toContain('2 deliveries in a row failed for good');
    const { data: disabled } = await admin.api.GET('/v1/organization/webhook-endpoints/{webhook_endpoint_id}', { params: { path: { webhook_endpoint_id: endpoint.id } } });
    expect(disabled).toMatchObject({ status: 'disabled', consecutive_failures: 2 });
    expect(disabled?.disabled_reason).toContain('The receiver answered 500.');
    // The deliveries still pending are not sent to a disabled endpoint.
    await waitUntil(async () => (await app.db('webhook_deliveries').where({ endpoint_id: endpoint.id, status: 'pending' })).length === 0, 'no pending delivery');
    const { data: enabled } = await admin.api.PATCH('/v1/organization/webhook-endpoints/{webhook_endpoint_id}', {
      params: { path: { webhook_endpoint_id: endpoint.id } },
      body: { status: 'enabled' },
    });
    expect(enabled).toMatchObject({ status: 'enabled', consecutive_failures: 0, disabled_reason: null, disabled_at: null });
  });

  it('sign with the previous secret too after a rotation, until it is revoked', async () => {
    const admin = await registeredUser(app);
    const to = await receiver();
    const { endpoint, secret: original } = await endpointFor(admin, to);
    const path = { params: { path: { webhook_endpoint_id: endpoint.id } } };
    const { data: rotated } = await admin.api.POST('/v1/organization/webhook-endpoints/{webhook_endpoint_id}/rotate-secret', { ...path, body: {} });
    expect(rotated?.secret).not.toBe(original);
    expect(Date.parse(rotated?.endpoint.previous_secret_expires_at ?? '') - Date.now()).toBeGreaterThan(86_000_000);
    to.secrets = [rotated?.secret ?? '', original];
    await admin.api.POST('/v1/organization/webhook-endpoints/{webhook_endpoint_id}/test', path);
    await waitUntil(async () => to.received.length === 1, 'a test after the rotation');
    expect(to.received[0]?.verifiedWith).toEqual([true, true]);
    expect(String(to.received[0]?.headers['webhook-signature']).split(' ')).toHaveLength(2);

    const { data: revoked } = await admin.api.POST('/v1/organization/webhook-endpoints/{webhook_endpoint_id}/rotate-secret', { ...path, body: { previous_secret_valid_for_seconds: 0 } });
    expect(revoked?.endpoint.previous_secret_expires_at).toBeNull();
    to.secrets = [revoked?.secret ?? '', rotated?.secret ?? '', original];
    await admin.api.POST('/v1/organization/webhook-endpoints/{webhook_endpoint_id}/test', path);
    await waitUntil(async () => to.received.length === 2, 'a test after the second rotation');
    expect(to.received[1]?.verifiedWith).toEqual([true, false, false]);
  });

  it('keep completed deliveries and their attempts listable for 30 days, then the daily job deletes them', async () => {
    const admin = await registeredUser(app);
    const to = await receiver();
    const { endpoint } = await endpointFor(admin, to);
    const path = { params: { path: { webhook_endpoint_id: endpoint.id } } };
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) ids.push((await admin.api.POST('/v1/organization/webhook-endpoints/{webhook_endpoint_id}/test', path)).data?.delivery.id ?? '');
    await waitUntil(async () => (await attemptsOf(admin, endpoint.id)).length === 2, 'both delivered');
    await waitUntil(async () => (await app.db('webhook_deliveries').where({ endpoint_id: endpoint.id }).whereNotNull('completed_at')).length === 2, 'both completed');
    expect((await attemptsPage(admin, endpoint.id)).total).toBe(2);
    await ageWebhookDelivery(app, ids[0] ?? '', 31);
    await ageWebhookDelivery(app, ids[1] ?? '', 29);
    await pruneWebhookDeliveriesJob(app.db).handle({}, { log: createLogger('silent'), retryCount: 0, lastAttempt: true });
    const page = await attemptsPage(admin, endpoint.id);
    // The total is a counter kept with every attempt recorded or pruned, not a count of the rows.
    expect([page.items.map((attempt) => attempt.delivery_id), page.total]).toEqual([[ids[1]], 1]);
  });

  it('are deleted with their deliveries: 204, then 404', async () => {
    const admin = await registeredUser(app);
    const to = await receiver();
    const { endpoint } = await endpointFor(admin, to);
    const path = { params: { path: { webhook_endpoint_id: endpoint.id } } };
    const { response } = await admin.api.DELETE('/v1/organization/webhook-endpoints/{webhook_endpoint_id}', path);
    expect(response.status).toBe(204);
    expect((await admin.api.GET('/v1/organization/webhook-endpoints/{webhook_endpoint_id}', path)).response.status).toBe(404);
    expect((await admin.api.GET('/v1/organization/webhook-endpoints/{webhook_endpoint_id}/attempts', path)).response.status).toBe(404);
    expect((await admin.api.POST('/v1/organization/webhook-endpoints/{webhook_endpoint_id}/test', path)).response.status).toBe(404);
  });
});

describe('webhook targets, without WEBHOOK_ALLOW_PRIVATE_TARGETS', () => {
  let strict: TestApp;
  let admin: SignedInUser;
  beforeAll(async () => {
    strict = await startTestApp({ WEBHOOK_RETRY_LIMIT: '0' }, { workers: true });
    admin = await registeredUser(strict);
  }, 60_000);
  afterAll(() => strict?.close());

  it.each([
    ['http://hooks.example.com/in', 'must be an https URL'],
    ['https://user:pass@hooks.example.com/in', 'credentials'],
  ])('refuses %s (%s) with 422, storing nothing', async (url, reason) => {
    const { response, error } = await admin.api.POST('/v1/organization/webhook-endpoints', { body: { url } });
    expect(response.status).toBe(422);
    expect(error).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ location: 'body/url' }] });
    expect(error?.errors?.[0]?.message).toContain(reason);
    expect(await strict.db('webhook_endpoints').count({ n: '*' }).first()).toEqual({ n: '0' });
  });

  it.each([
    'https://127.0.0.1/in',
    'https://localhost:8443/in',
    'https://[::1]/in',
    'https://[::ffff:127.0.0.1]/in',
    'https://[::ffff:a9fe:a9fe]/in',
    // IPv4-compatible (::/96), NAT64 (64:ff9b::/96, 64:ff9b:1::/48), 6to4 and Teredo forms of loopback and metadata addresses.
    'https://[::127.0.0.1]/in',
    'https://[::a9fe:a9fe]/in',
    'https://[::a00:1]/in',
    'https://[64:ff9b::7f00:1]/in',
    'https://[64:ff9b:1::a9fe:a9fe]/in',
    'https://[2002:7f00:1::1]/in',
    'https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/in',
    'https://[4000::1]/in',
    'https://169.254.169.254/latest/meta-data',
    'https://10.0.0.8/in',
    'https://192.168.1.20/in',
    'https://100.64.0.1/in',
    'https://[fd00::1]/in',
    'https://[fe80::1]/in',
    'https://224.0.0.251/in',
    'https://2130706433/in',
    'https://no-such-host.invalid/in',
  ])('refuses %s with 422 saying only that the target is not allowed, storing nothing', async (url) => {
    const { response, error } = await admin.api.POST('/v1/organization/webhook-endpoints', { body: { url } });
    expect(response.status).toBe(422);
    expect(error).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ location: 'body/url', message: TARGET_NOT_ALLOWED }] });
    expect(await strict.db('webhook_endpoints').count({ n: '*' }).first()).toEqual({ n: '0' });
  });

  it('is no DNS oracle: a name that resolves to loopback and one that does not resolve get the same answer, naming no address', async () => {
    const resolving = await admin.api.POST('/v1/organization/webhook-endpoints', { body: { url: 'https://localhost/in' } });
    const unknown = await admin.api.POST('/v1/organization/webhook-endpoints', { body: { url: 'https://no-such-host.invalid/in' } });
    expect({ ...resolving.error, request_id: undefined }).toEqual({ ...unknown.error, request_id: undefined });
    expect(JSON.stringify(resolving.error)).not.toMatch(/127\.0\.0\.1|::1|loopback|resolve \(/);
  });

  it('checks the address again at delivery: a host that now resolves to loopback (DNS rebinding) is not reached', async () => {
    const to = await receiver();
    const organizationId = (await admin.api.GET('/v1/organization')).data?.id ?? 0;
    // As if the host had resolved to a public address when the endpoint was saved: stored through
    // the repository, past the create-time check. It now resolves to 127.0.0.1.
    const port = new URL(to.url).port;
    const endpoint = await insertEndpoint(strict.db, {
      organization_id: organizationId,
      url: `https://localhost:${port}/hooks`,
      description: null,
      event_types: null,
      sealed_secret: strict.container.keyring.encrypt(SECRET_SEAL, 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw5Tc1YzWkQ8U='),
      created_by_user_id: null,
    });
    const literal = await insertEndpoint(strict.db, {
      organization_id: organizationId,
      url: `https://[::ffff:127.0.0.1]:${port}/hooks`,
      description: null,
      event_types: null,
      sealed_secret: strict.container.keyring.encrypt(SECRET_SEAL, 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw5Tc1YzWkQ8U='),
      created_by_user_id: null,
    });
    for (const id of [endpoint.id, literal.id]) {
      await admin.api.POST('/v1/organization/webhook-endpoints/{webhook_endpoint_id}/test', { params: { path: { webhook_endpoint_id: id } } });
      await waitUntil(async () => (await attemptsOf(admin, id)).length === 1, 'the refused attempt');
      const [attempt] = await attemptsOf(admin, id);
      expect(attempt).toMatchObject({ outcome: 'failed', response_status: null });
      expect(attempt?.error).toBe(`Refused target: ${TARGET_NOT_ALLOWED}.`);
    }
    expect(to.received).toEqual([]);
  });
});
