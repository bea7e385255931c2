import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import Stripe from 'stripe';
import { array, bool, createdFilter, listRoute, mergeMetadata, record, requiredStr, retrieveRoute, str, unknownParameter, type Context, type PathParams, type Route } from './api.ts';
import { checkoutRoutes } from './checkout.ts';
import { catalogRoutes } from './catalog.ts';
import { customerRoutes } from './customers.ts';
import { invalidRequest, invalidValue, StripeApiError, unknownParam } from './errors.ts';
import { decodeForm, type FormParams } from './form.ts';
import { servePage } from './pages.ts';
import { build, newId, StripeStore, type StripeObject } from './store.ts';
import { subscriptionRoutes } from './subscriptions.ts';
import { newWebhookSecret, WebhookSender, type Delivery, type EmulatedEvent, type EventDestination } from './webhooks.ts';

/**
 * A local Stripe emulator: a stand-in for api.stripe.com used by `make run` and the tests when no
 * `STRIPE_SECRET_KEY` is set. It is an honest simulation, in memory, of the subset of Stripe's REST
 * API (https://docs.stripe.com/api) the service calls through the real `stripe` SDK, pointed at it
 * with `host`/`port`/`protocol`: customers, SetupIntents, Checkout Sessions in setup mode (with a
 * page to enter a test card), PaymentMethods, Products and Prices, Billing Meters and meter events,
 * subscriptions with metered prices, invoices, test clocks, customer portal sessions, events and
 * signed webhooks. Requests are form-encoded with bracket notation and authenticated with the secret
 * key as a Bearer token; errors have Stripe's shape and status codes; POSTs honour
 * `Idempotency-Key` (https://docs.stripe.com/api/idempotent_requests); `expand[]` replaces ids by
 * objects (https://docs.stripe.com/api/expanding_objects). Objects start from Stripe's published
 * examples (see `store.ts`). The rules it enforces name the API reference page they follow.
 */
export interface StripeEmulatorOptions {
  /** 0 picks a free port. */
  port?: number;
  host?: string;
  /** Webhook endpoints to create at start (what an operator does in the Dashboard). */
  webhooks?: { url: string; secret?: string; enabledEvents?: string[] }[];
  /** Event destinations of thin events to create at start (what an operator does in the Dashboard). */
  eventDestinations?: { url: string; secret?: string; enabledEvents: string[] }[];
  /** Delays between delivery attempts of a webhook that got no 2xx; Stripe's own span three days. */
  webhookRetryDelaysMs?: number[];
  log: Logger;
}

export interface StripeEmulator {
  /** `http://127.0.0.1:<port>` */
  url: string;
  /** What to give `new Stripe(secretKey, { host, port, protocol })`. */
  connection: { host: string; port: number; protocol: 'http' };
  secretKey: string;
  publishableKey: string;
  /** The signing secrets of the webhook endpoints created at start, in their order. */
  webhookSecrets: string[];
  /** The signing secrets of the event destinations created at start, in their order. */
  eventDestinationSecrets: string[];
  /**
   * Points the event destination created at start number `index` (in their order) at `url`, keeping
   * its signing secret. For tests, which learn their app's port only after the emulator started;
   * Stripe's own update (`POST /v2/core/event_destinations/:id`) is a v2 request with a JSON body,
   * which the emulator does not serve.
   */
  pointEventDestination(index: number, url: string): void;
  apiVersion: string;
  /** Every delivery attempt so far (tests poll it). */
  deliveries: readonly Delivery[];
  stop(): Promise<void>;
}

/** The API version the emulator speaks: the one the SDK pins (`Stripe.API_VERSION`). */
export const EMULATOR_API_VERSION: string = Stripe.API_VERSION;

const IDEMPOTENCY_KEY_LIFETIME_MS = 24 * 3600 * 1000;

export async function startStripeEmulator(options: StripeEmulatorOptions): Promise<StripeEmulator> {
  const host = options.host ?? '127.0.0.1';
  const secretKey = `sk_test_emulator_${randomBytes(16).toString('hex')}`;
  const publishableKey = `pk_test_emulator_${randomBytes(16).toString('hex')}`;
  const store = new StripeStore();
  const secrets = new Map<string, string>();
  const webhooks = new WebhookSender(store, {
    apiVersion: EMULATOR_API_VERSION,
    retryDelaysMs: options.webhookRetryDelaysMs ?? [1_000, 5_000, 30_000, 120_000, 600_000],
    secretOf: (id) => secrets.get(id) ?? '',
    log: options.log,
  });
  const routes = [...customerRoutes, ...checkoutRoutes, ...catalogRoutes, ...subscriptionRoutes, ...eventRoutes(secrets)];
  const idempotency = new Map<string, { fingerprint: string; status: number; body: string; savedAt: number }>();
  let baseUrl = '';

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const ctx: Context = { store, webhooks, baseUrl, request: { id: newId('req', 14), idempotency_key: null } };
      void (async () => {
        if (await servePage(ctx, req, res, body)) return;
        serveApi(ctx, req, res, body);
      })().catch((error: unknown) => {
        options.log.error({ err: error }, 'Stripe emulator: request failed');
        if (!res.headersSent) sendJson(res, 500, new StripeApiError(500, 'api_error', 'An unknown error occurred').toBody(), {});
      });
    });
  });

  function serveApi(ctx: Context, req: IncomingMessage, res: ServerResponse, body: string): void {
    const url = new URL(req.url ?? '/', 'http://emulator');
    const headers: Record<string, string> = { 'request-id': ctx.request.id, 'stripe-version': EMULATOR_API_VERSION };
    const fail = (error: StripeApiError) => sendJson(res, error.status, error.toBody(), headers);
    const auth = authenticate(req.headers.authorization, secretKey);
    if (auth) return sendJson(res, 401, { error: { type: 'invalid_request_error', message: auth } }, headers);
    const match = matchRoute(routes, req.method ?? 'GET', url.pathname);
    if (!match) {
      return fail(invalidRequest(`Unrecognized request URL (${req.method}: ${url.pathname}). Please see https://stripe.com/docs or we can help at https://support.stripe.com/.`));
    }
    const { route, path } = match;
    const params = decodeForm(req.method === 'GET' || req.method === 'DELETE' ? url.search.slice(1) || body : body);
    const key = req.method === 'POST' ? header(req, 'idempotency-key') : undefined;
    if (key) {
      ctx.request.idempotency_key = key;
      headers['idempotency-key'] = key;
      const fingerprint = createHash('sha256').update(`${req.method} ${url.pathname}\n${canonical(params)}`).digest('hex');
      // Keys are kept 24 hours (https://docs.stripe.com/api/idempotent_requests); an older one is new again.
      const kept = idempotency.get(key);
      const saved = kept && Date.now() - kept.savedAt < IDEMPOTENCY_KEY_LIFETIME_MS ? kept : undefined;
      if (saved && saved.fingerprint !== fingerprint) {
        return fail(
          new StripeApiError(
            400,
            'idempotency_error',
            `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${key}' if you meant to execute a different request.`,
          ),
        );
      }
      if (saved) return sendRaw(res, saved.status, saved.body, { ...headers, 'idempotent-replayed': 'true' });
      const { status, text } = execute(ctx, route, params, path);
      // Parameter errors are not saved (they never ran); every result that ran is replayed as it was.
      if (!(status === 400 && /"code": ?"parameter_(unknown|missing)"/.test(text))) idempotency.set(key, { fingerprint, status, body: text, savedAt: Date.now() });
      return sendRaw(res, status, text, headers);
    }
    const { status, text } = execute(ctx, route, params, path);
    sendRaw(res, status, text, headers);
  }

  function execute(ctx: Context, route: Route, params: FormParams, path: PathParams): { status: number; text: string } {
    try {
      const expand = array(params, 'expand')?.map(String) ?? [];
      const unknown = unknownParameter(route, params);
      if (unknown) throw unknownParam(unknown);
      for (const name of route.required ?? []) if (params[name] === undefined || params[name] === '') throw invalidRequest(`Missing required param: ${name}.`, { code: 'parameter_missing', param: name });
      const result = route.handle(ctx, params, path);
      return { status: 200, text: JSON.stringify(expand.length ? expanded(store, result, expand) : result, null, 2) };
    } catch (error) {
      if (error instanceof StripeApiError) return { status: error.status, text: JSON.stringify(error.toBody(), null, 2) };
      throw error;
    }
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  baseUrl = `http://${host}:${port}`;

  const webhookSecrets = (options.webhooks ?? []).map((endpoint) => {
    const secret = endpoint.secret ?? newWebhookSecret();
    const created = createWebhookEndpoint(store, endpoint.url, endpoint.enabledEvents ?? ['*']);
    secrets.set(created.id, secret);
    return secret;
  });
  const eventDestinations = (options.eventDestinations ?? []).map((destination) => {
    const secret = destination.secret ?? newWebhookSecret();
    const created = store.put<EventDestination>({
      id: newId('ed_test', 44),
      object: 'v2.core.event_destination',
      enabled_events: destination.enabledEvents,
      event_payload: 'thin',
      status: 'enabled',
      type: 'webhook_endpoint',
      webhook_endpoint: { url: destination.url },
    });
    secrets.set(created.id, secret);
    return { destination: created, secret };
  });
  options.log.info({ url: baseUrl }, 'Stripe emulator (local stand-in) started');

  return {
    url: baseUrl,
    connection: { host, port, protocol: 'http' },
    secretKey,
    publishableKey,
    webhookSecrets,
    eventDestinationSecrets: eventDestinations.map(({ secret }) => secret),
    pointEventDestination: (index, url) => {
      const created = eventDestinations[index];
      if (!created) throw new Error(`no event destination ${index} was created at start`);
      created.destination.webhook_endpoint.url = url;
    },
    apiVersion: EMULATOR_API_VERSION,
    deliveries: webhooks.deliveries,
    stop: async () => {
      webhooks.stop();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Events (https://docs.stripe.com/api/events) and webhook endpoints (https://docs.stripe.com/api/webhook_endpoints). */
function eventRoutes(secrets: Map<string, string>): Route[] {
  return [
    retrieveRoute('/v1/events/:id', 'event'),
    // https://docs.stripe.com/api/v2/core/events/retrieve: a thin event with its data.
    retrieveRoute('/v2/core/events/:id', 'v2.core.event'),
    listRoute<EmulatedEvent>('/v1/events', 'event', { type: (e, v) => e.type === v, types: (e, v) => v.includes(e.type), created: createdFilter() }),
    {
      method: 'POST',
      path: '/v1/webhook_endpoints',
      params: ['url', 'enabled_events', 'description', 'metadata', 'api_version'],
      required: ['url', 'enabled_events'],
      handle(ctx, params) {
        const url = requiredStr(params, 'url');
        if (!URL.canParse(url)) throw invalidRequest('Invalid URL: URL must be publicly accessible or a valid URL.', { param: 'url' });
        const endpoint = createWebhookEndpoint(ctx.store, url, (array(params, 'enabled_events') ?? []).map(String), str(params, 'description'), mergeMetadata({}, record(params, 'metadata')));
        const secret = newWebhookSecret();
        secrets.set(endpoint.id, secret);
        // The signing secret is in the answer to the creation only.
        return { ...endpoint, secret };
      },
    },
    retrieveRoute('/v1/webhook_endpoints/:id', 'webhook_endpoint'),
    // https://docs.stripe.com/api/webhook_endpoints/update: the signing secret stays the one made at creation.
    {
      method: 'POST',
      path: '/v1/webhook_endpoints/:id',
      params: ['url', 'enabled_events', 'disabled', 'description', 'metadata'],
      handle(ctx, params, path) {
        const endpoint = ctx.store.get<Stripe.WebhookEndpoint>(path.id, 'webhook_endpoint');
        const url = str(params, 'url');
        if (url !== undefined && !URL.canParse(url)) throw invalidRequest('Invalid URL: URL must be publicly accessible or a valid URL.', { param: 'url' });
        const events = array(params, 'enabled_events')?.map(String);
        if (params.enabled_events !== undefined && !events?.length) {
          throw invalidValue(
            'enabled_events',
            "You passed an empty string for 'enabled_events'. We assume empty values are an attempt to unset a parameter; however 'enabled_events' cannot be unset. You should remove 'enabled_events' from your request or supply a non-empty value.",
          );
        }
        const disabled = bool(params, 'disabled');
        const description = str(params, 'description');
        // Changed in place: a delivery still being retried goes to the endpoint's URL as it now is.
        if (url !== undefined) endpoint.url = url;
        if (events) endpoint.enabled_events = events;
        if (disabled !== undefined) endpoint.status = disabled ? 'disabled' : 'enabled';
        if (description !== undefined) endpoint.description = description || null;
        if (params.metadata !== undefined) endpoint.metadata = mergeMetadata(endpoint.metadata, record(params, 'metadata'));
        return endpoint;
      },
    },
    listRoute<Stripe.WebhookEndpoint>('/v1/webhook_endpoints', 'webhook_endpoint', {}),
    {
      method: 'DELETE',
      path: '/v1/webhook_endpoints/:id',
      params: [],
      handle(ctx, _params, path) {
        ctx.store.get(path.id, 'webhook_endpoint');
        ctx.store.delete(path.id);
        secrets.delete(path.id);
        return { id: path.id, object: 'webhook_endpoint', deleted: true };
      },
    },
  ];
}

function createWebhookEndpoint(store: StripeStore, url: string, events: string[], description?: string, metadata: Record<string, string> = {}): Stripe.WebhookEndpoint {
  if (!events.length) throw invalidRequest('Missing required param: enabled_events.', { code: 'parameter_missing', param: 'enabled_events' });
  return store.put(
    build<Stripe.WebhookEndpoint>('webhook_endpoint', {
      id: newId('we'),
      api_version: EMULATOR_API_VERSION,
      created: store.now(),
      description: description ?? null,
      enabled_events: events,
      metadata,
      status: 'enabled',
      url,
    }),
  );
}

function matchRoute(routes: Route[], method: string, pathname: string): { route: Route; path: PathParams } | undefined {
  const parts = pathname.split('/');
  for (const route of routes) {
    if (route.method !== method) continue;
    const pattern = route.path.split('/');
    if (pattern.length !== parts.length) continue;
    const path: PathParams = { id: '' };
    const matches = pattern.every((segment, i) => {
      const part = parts[i] ?? '';
      if (segment !== ':id') return segment === part;
      path.id = decodeURIComponent(part);
      return part !== '';
    });
    if (matches) return { route, path };
  }
  return undefined;
}

/** Stripe's 401 messages; undefined when the key is the emulator's secret key (Bearer, or Basic with the key as user). */
function authenticate(authorization: string | undefined, secretKey: string): string | undefined {
  const [scheme, value] = (authorization ?? '').split(' ');
  const key = scheme === 'Bearer' ? value : scheme === 'Basic' && value ? Buffer.from(value, 'base64').toString().split(':')[0] : undefined;
  if (!key) {
    return "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for details, or we can help at https://support.stripe.com/.";
  }
  const digest = (text: string) => createHash('sha256').update(text).digest();
  if (!timingSafeEqual(digest(key), digest(secretKey))) return `Invalid API Key provided: ${key.slice(0, 8)}${'*'.repeat(Math.max(0, key.length - 12))}${key.slice(-4)}`;
  return undefined;
}

/** `expand[]`: each dotted path's last id becomes its object (`data.` paths apply to each list element). */
function expanded(store: StripeStore, result: unknown, paths: string[]): unknown {
  const copy = structuredClone(result) as StripeObject;
  for (const path of paths) {
    const isList = copy.object === 'list' && path.startsWith('data.');
    const targets = isList ? (copy.data as StripeObject[]) : [copy];
    const segments = (isList ? path.slice(5) : path).split('.');
    for (const target of targets) {
      let node: Record<string, unknown> = target;
      for (const [i, segment] of segments.entries()) {
        const value = node[segment];
        if (i === segments.length - 1) {
          if (typeof value === 'string') node[segment] = structuredClone(store.any(value) ?? value);
          else if (value !== null && typeof value !== 'object') throw invalidRequest(`This property cannot be expanded (${path}).`, { param: 'expand' });
        } else if (typeof value === 'object' && value !== null) {
          node = value as Record<string, unknown>;
        } else if (typeof value === 'string' && store.any(value)) {
          node[segment] = structuredClone(store.any(value));
          node = node[segment] as Record<string, unknown>;
        } else {
          throw invalidRequest(`This property cannot be expanded (${path}).`, { param: 'expand' });
        }
      }
    }
  }
  return copy;
}

/** The parameters in a stable order, so one request sent twice has one fingerprint. */
function canonical(value: unknown): string {
  if (typeof value !== 'object' || value === null) return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  return `{${Object.keys(value)
    .sort()
    .map((key) => `${JSON.stringify(key)}:${canonical((value as Record<string, unknown>)[key])}`)
    .join(',')}}`;
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string>): void {
  sendRaw(res, status, JSON.stringify(body, null, 2), headers);
}

function sendRaw(res: ServerResponse, status: number, text: string, headers: Record<string, string>): void {
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

