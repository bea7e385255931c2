import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadOpenApiDocument } from '../../src/openapi-document.ts';
import { hashToken } from '../../src/crypto.ts';
import type { SignedInUser } from '../factories/accounts.ts';
import { Browser } from '../helpers/browser.ts';
import { checkResponse, templateOf } from '../helpers/contract.ts';
import { changedTables, tableDigester } from '../helpers/db-digest.ts';
import { hostileSegment, hostileValue, malformedJson, validValue, type Schema } from './schema-arbitrary.ts';
import { ACTORS, VALID_REQUESTS, type Actor, type ValidRequest } from './valid-requests.ts';
import { FuzzWorld, HOSTED_MODEL } from './world.ts';

/**
 * Every operation of the published document fuzzed through the real HTTP interface (issues #12,
 * #38), against a world where every operation can succeed (./world.ts: running deployments of
 * every model type on the cluster simulator, a hosted model, a subscription, an SSO provider). For
 * each operation, `FUZZ_RUNS` cases (default 20 here; `make fuzz` runs more) from a fixed
 * `FUZZ_SEED`, of three kinds:
 * - valid: the request the operation should answer with success (./valid-requests.ts: the
 *   document's example body and the world's ids, something fresh where the case uses it up);
 * - valid by the schema: the same caller and ids with a body generated from the schema;
 * - fuzzed: a caller (nobody, each role of a team, an API key), path ids of every shape, query
 *   values, and a body valid by the schema then mutated (a field hostile, a required one dropped,
 *   an unknown one added, the whole body replaced), malformed JSON, or another content type.
 * Properties of every answer: never a 500, a 5xx only where the operation documents it (the
 * engine's and the payment processor's failures), the status and body as the document says for
 * that operation (checkResponse: schema, media type, error codes), and a refused request (4xx)
 * writes nothing: a digest of every table and job queue is the same before and after. And of each
 * operation: some case succeeded (a 2xx, or the 302 of a redirect), and an inference operation's
 * cases reached the engine.
 */
interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header' | 'cookie';
  required?: boolean;
  schema: Schema;
}
interface MediaType {
  schema: Schema;
  example?: unknown;
  examples?: Record<string, { value: unknown }>;
}
interface Operation {
  operationId: string;
  parameters?: Parameter[];
  requestBody?: { content: Record<string, MediaType> };
  responses: Record<string, unknown>;
  security?: Array<Record<string, string[]>>;
}
const document = loadOpenApiDocument() as unknown as { paths: Record<string, Record<string, Operation>>; components: { schemas: Record<string, Schema> }; security?: Operation['security'] };
const components = document.components.schemas;
const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;
const operations = Object.entries(document.paths).flatMap(([template, item]) =>
  METHODS.filter((method) => item[method]).map((method) => ({ template, method, operation: item[method] as Operation })),
);

const RUNS = Number(process.env.FUZZ_RUNS ?? 20);
const SEED = Number(process.env.FUZZ_SEED ?? 20261124);

/**
 * Tables and job queues a refused request may write, or a peer writes meanwhile: brute-force
 * counters (a refused sign-in or reset counts toward its limit: that is their point), and the
 * payment processor's webhook events and their jobs (the emulator delivers them when it likes, for
 * earlier successful calls).
 */
const WRITTEN_ANYWAY = ['rate_limit_points', 'billing_webhook_events', 'billing-event'];

let world: FuzzWorld;
/** Ids that exist, so that some fuzzed cases reach past the 404. */
const known: Record<string, string[]> = {};
let tableDigest: () => Promise<string>;
/** Statuses seen, per operation. */
const seen = new Map<string, Map<number, number>>();

beforeAll(async () => {
  world = await FuzzWorld.build();
  const d = world.deployments;
  Object.assign(known, {
    deployment_id: [d.chat.id, d.embedding.id],
    model: [d.chat.id, HOSTED_MODEL],
    model_id: [world.catalogModelId],
    webhook_endpoint_id: [world.webhookEndpointId],
    provider: ['fuzzidp'],
  });
  tableDigest = await tableDigester(world.app.db, WRITTEN_ANYWAY);
}, 180_000);
afterAll(async () => {
  const lines = [...seen].map(([operation, statuses]) => `${operation}: ${[...statuses].map(([status, n]) => `${status}×${n}`).join(' ')}`);
  const cases = [...seen.values()].reduce((sum, statuses) => sum + [...statuses.values()].reduce((a, b) => a + b, 0), 0);
  // The report of `make fuzz` (the suite's short run stays quiet).
  if (process.env.FUZZ_RUNS) process.stdout.write(`fuzz: ${seen.size} operations × ${RUNS} cases = ${cases} requests (seed ${SEED})\n${lines.join('\n')}\n`);
  await world?.close();
});

async function digest(): Promise<string> {
  await world.app.container.usage.flush();
  return tableDigest();
}

/**
 * A caller whose session a case ended (sign-out, a session revoked) gets a new one before the
 * next case, from the session store as sign-in makes them: signing in over HTTP again and again
 * would run into the sign-in limits the cases themselves exhaust.
 */
async function sessionOf(actor: Exclude<Actor, 'nobody' | 'api_key'>): Promise<SignedInUser> {
  const user = world.members[actor];
  const { rows } = await world.app.db.raw<{ rows: unknown[] }>('select 1 from sessions where id = ? and expires_at > now()', [sessionIdOf(user)]);
  if (!rows.length) await world.sessionFor(user.user.id, world.organizationId, user.browser);
  return user;
}

/** The stored id of the browser's session: the SHA-256 of its token. */
const sessionIdOf = (user: SignedInUser) => hashToken(user.browser.cookies.get(world.app.container.cookies.name) ?? '');

type Body = { kind: 'none' } | { kind: 'json'; value: unknown } | { kind: 'raw'; text: string; contentType: string } | { kind: 'form'; form: FormData };

function bodyFor(operation: Operation): fc.Arbitrary<Body> {
  const schema = operation.requestBody?.content['application/json']?.schema;
  const raw = fc.record({ kind: fc.constant('raw' as const), text: malformedJson, contentType: fc.constantFrom('application/json', 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x') });
  const none = fc.constant({ kind: 'none' as const });
  if (!schema) return fc.oneof(none, raw, hostileValue.map((value) => ({ kind: 'json' as const, value })));
  const valid = validValue(schema, components);
  const mutated = fc.tuple(valid, fc.constantFrom('replace', 'drop', 'extra', 'whole'), hostileValue, fc.nat()).map(([value, how, hostile, pick]) => ({
    kind: 'json' as const,
    value: mutate(value, how, hostile, pick),
  }));
  return fc.oneof({ arbitrary: valid.map((value) => ({ kind: 'json' as const, value })), weight: 3 }, { arbitrary: mutated, weight: 4 }, { arbitrary: raw, weight: 1 }, { arbitrary: none, weight: 1 });
}

function mutate(value: unknown, how: string, hostile: unknown, pick: number): unknown {
  if (how === 'whole' || !value || typeof value !== 'object' || Array.isArray(value)) return hostile;
  const fields = value as Record<string, unknown>;
  const names = Object.keys(fields);
  const name = names[pick % Math.max(names.length, 1)];
  if (how === 'extra' || !name) return { ...fields, [`unexpected_${pick % 7}`]: hostile };
  if (how === 'drop') return Object.fromEntries(Object.entries(fields).filter(([field]) => field !== name));
  return { ...fields, [name]: hostile };
}

/**
 * A fuzzed case's value of a parameter. The world's shared resources are among the values, except
 * for an operation that deletes: the later operations need them (its valid cases delete fresh ones).
 */
function parameterValue(parameter: Parameter, deletes: boolean): fc.Arbitrary<string | undefined> {
  const valid = validValue(parameter.schema, components).map((value) => (value === null || value === undefined ? '' : typeof value === 'object' ? JSON.stringify(value) : String(value)));
  const real = deletes ? undefined : known[parameter.name];
  const choices: fc.Arbitrary<string>[] = [valid, hostileSegment];
  if (real?.length) choices.push(fc.constantFrom(...real));
  const value = fc.oneof(...choices);
  return parameter.in === 'path' || parameter.required ? value : fc.option(value, { nil: undefined });
}

/** What a case sends: its caller, path and query values, headers and body. */
interface Outgoing {
  caller: Actor | Browser;
  path: Record<string, string | undefined>;
  query: Record<string, string | undefined>;
  headers?: Record<string, string>;
  body: Body;
}

async function send(template: string, method: string, outgoing: Outgoing): Promise<{ response: Response; reached: string | undefined }> {
  const { caller, path, query, body } = outgoing;
  let url = template.replace(/\{([^}]+)\}/g, (_, name: string) => encodeURIComponent(path[name] ?? '').replaceAll('%25', '%'));
  const search = new URLSearchParams(Object.entries(query).filter((entry): entry is [string, string] => entry[1] !== undefined));
  if ([...search].length) url += `?${search}`;
  const headers = new Headers(outgoing.headers);
  let payload: string | FormData | undefined;
  if (body.kind === 'json') {
    headers.set('content-type', 'application/json');
    payload = JSON.stringify(body.value) ?? 'null';
  } else if (body.kind === 'raw') {
    headers.set('content-type', body.contentType);
    payload = body.text;
  } else if (body.kind === 'form') {
    payload = body.form;
  }
  const init: RequestInit = { method: method.toUpperCase(), headers, body: method === 'get' ? undefined : payload, redirect: 'manual' };
  const target = new URL(url, world.app.url);
  const reached = templateOf(target.pathname);
  if (caller instanceof Browser) return { response: await caller.fetch(url, init), reached };
  if (caller === 'nobody') return { response: await fetch(target, init), reached };
  if (caller === 'api_key') {
    headers.set('authorization', `Bearer ${world.key}`);
    return { response: await fetch(target, init), reached };
  }
  return { response: await (await sessionOf(caller)).browser.fetch(url, init), reached };
}

/** The document's example body of the operation. */
function exampleOf(operation: Operation): unknown {
  const media = operation.requestBody?.content['application/json'];
  return media && (media.example ?? Object.values(media.examples ?? {})[0]?.value);
}

/** Who sends an operation's valid cases unless it says: the API key on inference, nobody where no credential is asked, else the super_admin. */
function defaultCaller(operation: Operation): Actor {
  const requirements = operation.security ?? document.security ?? [];
  if (!requirements.length) return 'nobody';
  return requirements.some((requirement) => 'ApiKeyBearer' in requirement) ? 'api_key' : 'super_admin';
}

/**
 * A valid case's request: the operation's own (VALID_REQUESTS) over the defaults, its fields laid
 * over the example body, or over `generated` (a body from the schema) when given.
 */
async function validOutgoing(operation: Operation, variant: number, generated?: unknown): Promise<Outgoing> {
  const parameters = operation.parameters ?? [];
  const example = exampleOf(operation);
  await sessionOf('super_admin'); // whose session a previous case may have ended, and who makes what the case uses
  const request: ValidRequest = (await VALID_REQUESTS[operation.operationId]?.(world, variant, example)) ?? {};
  const path = Object.fromEntries(parameters.filter((p) => p.in === 'path').map((p) => [p.name, request.path?.[p.name] ?? known[p.name]?.[0]]));
  const base = generated !== undefined && typeof generated === 'object' && !Array.isArray(generated) ? generated : example;
  let body: Body = { kind: 'none' };
  if (request.form) body = { kind: 'form', form: request.form };
  else if (request.raw !== undefined) body = { kind: 'raw', text: request.raw, contentType: 'application/json' };
  else if (base !== undefined) body = { kind: 'json', value: { ...(base as object), ...request.fields } };
  return { caller: request.caller ?? defaultCaller(operation), path, query: request.query ?? {}, headers: request.headers, body };
}

/** The 5xx an operation may answer: an engine's or the payment processor's failure, as documented. */
const mayFailUpstream = (template: string) => template.startsWith('/v1/billing') || !template.startsWith('/v1/organization') && !template.startsWith('/v1/user') && !template.startsWith('/api/');
/** The operations that call the engine (the inference ones that post), and the engine's route each is relayed to. */
const engineRoute = (method: string, operation: Operation, template: string) =>
  method === 'post' && (operation.security ?? []).some((requirement) => 'ApiKeyBearer' in requirement) ? `POST ${template}` : undefined;
const succeeded = (status: number) => status >= 200 && status < 400;

describe('every operation of the document, fuzzed', () => {
  it('covers every operation', () => {
    expect(operations.length).toBeGreaterThan(80);
  });

  for (const { template, method, operation } of operations) {
    it(`${method.toUpperCase()} ${template} (${operation.operationId})`, async () => {
      const parameters = operation.parameters ?? [];
      const pick = (where: Parameter['in']) =>
        fc.record(Object.fromEntries(parameters.filter((p) => p.in === where).map((p) => [p.name, parameterValue(p, method === 'delete')])) as Record<string, fc.Arbitrary<string | undefined>>);
      const schema = operation.requestBody?.content['application/json']?.schema;
      const cases = fc.record({
        kind: fc.oneof({ arbitrary: fc.constant('valid' as const), weight: 2 }, { arbitrary: fc.constant('schema' as const), weight: 1 }, { arbitrary: fc.constant('fuzzed' as const), weight: 3 }),
        variant: fc.nat(),
        generated: schema ? validValue(schema, components) : fc.constant(undefined),
        actor: fc.constantFrom(...ACTORS),
        path: pick('path'),
        query: pick('query'),
        body: bodyFor(operation),
      });
      const statuses = seen.get(operation.operationId) ?? new Map<number, number>();
      seen.set(operation.operationId, statuses);
      const route = engineRoute(method, operation, template);
      const engineCalls = () => (route ? (world.app.simulator?.requests[route] ?? 0) : 0);
      const engineBefore = engineCalls();
      await fc.assert(
        fc.asyncProperty(cases, async ({ kind, variant, generated, actor, path, query, body }) => {
          const outgoing = kind === 'fuzzed' ? { caller: actor, path, query, body } : await validOutgoing(operation, variant, kind === 'schema' ? generated : undefined);
          if (typeof outgoing.caller === 'string' && outgoing.caller !== 'nobody' && outgoing.caller !== 'api_key') await sessionOf(outgoing.caller);
          const before = await digest();
          const { response, reached } = await send(template, method, outgoing);
          statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
          const who = outgoing.caller instanceof Browser ? 'a new user' : outgoing.caller;
          const what = `${kind} case: ${who} ${method.toUpperCase()} ${template} → ${response.status}`;
          expect(response.status, what).not.toBe(500);
          if (response.status >= 500) expect(mayFailUpstream(template), `${what}: a 5xx on a route that calls no upstream`).toBe(true);
          // A path id such as `..` or `` makes another path of the document (URLs resolve dot segments).
          if (reached) await checkResponse(method, reached, response);
          await response.body?.cancel();
          if (response.status >= 400) expect(changedTables(before, await digest()), `${what}: a refused request changed these tables`).toEqual([]);
        }),
        { seed: SEED, numRuns: RUNS, endOnFailure: true },
      );
      const successes = [...statuses].filter(([status]) => succeeded(status)).reduce((sum, [, n]) => sum + n, 0);
      expect(successes, `${operation.operationId}: no case succeeded (${[...statuses].map(([status, n]) => `${status}×${n}`).join(' ')})`).toBeGreaterThan(0);
      if (route) expect(engineCalls(), `${operation.operationId}: no case reached the engine`).toBeGreaterThan(engineBefore);
    });
  }
});
