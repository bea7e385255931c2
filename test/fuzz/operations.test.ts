import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadOpenApiDocument } from '../../src/openapi-document.ts';
import { apiKey } from '../factories/api-keys.ts';
import { hashToken } from '../../src/crypto.ts';
import type { SignedInUser } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import { team, type Team } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { checkResponse, templateOf } from '../helpers/contract.ts';
import { changedTables, tableDigester } from '../helpers/db-digest.ts';
import { hostileSegment, hostileValue, malformedJson, validValue, type Schema } from './schema-arbitrary.ts';

/**
 * Every operation of the published document fuzzed through the real HTTP interface (issue #12):
 * for each, `FUZZ_RUNS` cases (default 20 here; `make fuzz` runs more) from a fixed `FUZZ_SEED`,
 * each a caller (nobody, each role of a team, an API key), path ids of every shape, query values,
 * and a body that is valid by the document's schema, valid then mutated (a field hostile, a
 * required one dropped, an unknown one added, the whole body replaced), malformed JSON, or sent
 * with another content type. Properties of every answer: never a 500, a 5xx only where the
 * operation documents it (the engine's and the payment processor's failures), the status and body
 * as the document says for that operation (checkResponse: schema, media type, error codes), and a
 * refused request (4xx) writes nothing: a digest of every table is the same before and after.
 */
interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header' | 'cookie';
  required?: boolean;
  schema: Schema;
}
interface Operation {
  operationId: string;
  parameters?: Parameter[];
  requestBody?: { content: Record<string, { schema: Schema }> };
  responses: Record<string, unknown>;
  security?: Array<Record<string, string[]>>;
}
const document = loadOpenApiDocument() as unknown as { paths: Record<string, Record<string, Operation>>; components: { schemas: Record<string, Schema> } };
const components = document.components.schemas;
const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;
const operations = Object.entries(document.paths).flatMap(([template, item]) =>
  METHODS.filter((method) => item[method]).map((method) => ({ template, method, operation: item[method] as Operation })),
);

const RUNS = Number(process.env.FUZZ_RUNS ?? 20);
const SEED = Number(process.env.FUZZ_SEED ?? 20261124);
const ACTORS = ['nobody', 'super_admin', 'admin', 'member', 'viewer', 'api_key'] as const;
type Actor = (typeof ACTORS)[number];

/**
 * Tables a refused request may write, or a peer writes meanwhile: brute-force counters (a refused
 * sign-in or reset counts toward its limit: that is their point), and the payment processor's
 * webhook events (the emulator delivers them when it likes, for earlier successful calls).
 */
const WRITTEN_ANYWAY = ['rate_limit_points', 'billing_webhook_events', 'billing-event'];

let app: TestApp;
let members: Team;
let key: string;
/** Ids that exist, so that some cases reach past the 404. */
const known: Record<string, string[]> = {};
let tableDigest: () => Promise<string>;
/** Statuses seen, per operation. */
const seen = new Map<string, Map<number, number>>();

beforeAll(async () => {
  app = await startTestApp({ MAX_ACTIVE_RESOURCES: '50', BILLING_ENFORCEMENT: 'false', WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' }, { stripe: true });
  members = await team(app);
  organizationId = (await members.super_admin.api.GET('/v1/organization')).data?.id ?? 0;
  const requested = await deployment(app, members.super_admin, 'requested');
  const created = await apiKey(members.super_admin, [requested.id], { allow_hosted_models: true });
  key = created.key;
  const { data: invitation } = await members.super_admin.api.POST('/v1/organization/invitations', { body: { email: `fuzz-${Date.now()}@example.com` } });
  const { data: webhook } = await members.super_admin.api.POST('/v1/organization/webhook-endpoints', { body: { url: 'http://127.0.0.1:9/hooks' } });
  Object.assign(known, {
    deployment_id: [requested.id],
    id: [requested.id],
    api_key_id: [String(created.id)],
    invitation_id: [String(invitation?.id)],
    webhook_endpoint_id: [webhook?.endpoint.id ?? ''],
  });
  tableDigest = await tableDigester(app.db, WRITTEN_ANYWAY);
}, 120_000);
afterAll(async () => {
  const lines = [...seen].map(([operation, statuses]) => `${operation}: ${[...statuses].map(([status, n]) => `${status}×${n}`).join(' ')}`);
  const cases = [...seen.values()].reduce((sum, statuses) => sum + [...statuses.values()].reduce((a, b) => a + b, 0), 0);
  // The report of `make fuzz` (the suite's short run stays quiet).
  if (process.env.FUZZ_RUNS) process.stdout.write(`fuzz: ${seen.size} operations × ${RUNS} cases = ${cases} requests (seed ${SEED})\n${lines.join('\n')}\n`);
  await app?.close();
});

async function digest(): Promise<string> {
  await app.container.usage.flush();
  return tableDigest();
}

/** The organization of the team, whose sessions the callers get back. */
let organizationId: number;

/**
 * A caller whose session a case ended (sign-out, a session revoked) gets a new one before the
 * next case, from the session store as sign-in makes them: signing in over HTTP again and again
 * would run into the sign-in limits the cases themselves exhaust.
 */
async function sessionOf(actor: Exclude<Actor, 'nobody' | 'api_key'>): Promise<SignedInUser> {
  const user = members[actor];
  const cookies = app.container.cookies;
  const { rows } = await app.db.raw<{ rows: unknown[] }>('select 1 from sessions where id = ? and expires_at > now()', [sessionIdOf(user)]);
  if (!rows.length) {
    const session = await app.container.sessions.create(app.db, { userId: user.user.id, organizationId, authMethod: 'password' });
    user.browser.cookies.set(cookies.name, session.token);
    user.browser.cookies.set(cookies.csrfName, cookies.csrfToken(session.principal.sessionId));
  }
  return user;
}

/** The stored id of the browser's session: the SHA-256 of its token. */
const sessionIdOf = (user: SignedInUser) => hashToken(user.browser.cookies.get(app.container.cookies.name) ?? '');

type Body = { kind: 'none' } | { kind: 'json'; value: unknown } | { kind: 'raw'; text: string; contentType: string };

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

function parameterValue(parameter: Parameter): fc.Arbitrary<string | undefined> {
  const valid = validValue(parameter.schema, components).map((value) => (value === null || value === undefined ? '' : typeof value === 'object' ? JSON.stringify(value) : String(value)));
  const real = known[parameter.name];
  const choices: fc.Arbitrary<string>[] = [valid, hostileSegment];
  if (real?.length) choices.push(fc.constantFrom(...real));
  const value = fc.oneof(...choices);
  return parameter.in === 'path' || parameter.required ? value : fc.option(value, { nil: undefined });
}

async function send(
  template: string,
  method: string,
  actor: Actor,
  path: Record<string, string | undefined>,
  query: Record<string, string | undefined>,
  body: Body,
): Promise<{ response: Response; reached: string | undefined }> {
  let url = template.replace(/\{([^}]+)\}/g, (_, name: string) => encodeURIComponent(path[name] ?? '').replaceAll('%25', '%'));
  const search = new URLSearchParams(Object.entries(query).filter((entry): entry is [string, string] => entry[1] !== undefined));
  if ([...search].length) url += `?${search}`;
  const headers = new Headers();
  let payload: string | undefined;
  if (body.kind === 'json') {
    headers.set('content-type', 'application/json');
    payload = JSON.stringify(body.value) ?? 'null';
  } else if (body.kind === 'raw') {
    headers.set('content-type', body.contentType);
    payload = body.text;
  }
  const init: RequestInit = { method: method.toUpperCase(), headers, body: method === 'get' ? undefined : payload, redirect: 'manual' };
  const target = new URL(url, app.url);
  const reached = templateOf(target.pathname);
  if (actor === 'nobody') return { response: await fetch(target, init), reached };
  if (actor === 'api_key') {
    headers.set('authorization', `Bearer ${key}`);
    return { response: await fetch(target, init), reached };
  }
  return { response: await (await sessionOf(actor)).browser.fetch(url, init), reached };
}

/** The 5xx an operation may answer: an engine's or the payment processor's failure, as documented. */
const mayFailUpstream = (template: string) => template.startsWith('/v1/billing') || !template.startsWith('/v1/organization') && !template.startsWith('/v1/user') && !template.startsWith('/api/');

describe('every operation of the document, fuzzed', () => {
  it('covers every operation', () => {
    expect(operations.length).toBeGreaterThan(60);
  });

  for (const { template, method, operation } of operations) {
    it(`${method.toUpperCase()} ${template} (${operation.operationId})`, async () => {
      const parameters = operation.parameters ?? [];
      const pick = (where: Parameter['in']) =>
        fc.record(Object.fromEntries(parameters.filter((p) => p.in === where).map((p) => [p.name, parameterValue(p)])) as Record<string, fc.Arbitrary<string | undefined>>);
      const cases = fc.record({ actor: fc.constantFrom(...ACTORS), path: pick('path'), query: pick('query'), body: bodyFor(operation) });
      const statuses = seen.get(operation.operationId) ?? new Map<number, number>();
      seen.set(operation.operationId, statuses);
      await fc.assert(
        fc.asyncProperty(cases, async ({ actor, path, query, body }) => {
          if (actor !== 'nobody' && actor !== 'api_key') await sessionOf(actor);
          const before = await digest();
          const { response, reached } = await send(template, method, actor, path, query, body);
          statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
          const what = `${actor} ${method.toUpperCase()} ${template} → ${response.status}`;
          expect(response.status, what).not.toBe(500);
          if (response.status >= 500) expect(mayFailUpstream(template), `${what}: a 5xx on a route that calls no upstream`).toBe(true);
          // A path id such as `..` or `` makes another path of the document (URLs resolve dot segments).
          if (reached) await checkResponse(method, reached, response);
          await response.body?.cancel();
          if (response.status >= 400) expect(changedTables(before, await digest()), `${what}: a refused request changed these tables`).toEqual([]);
        }),
        { seed: SEED, numRuns: RUNS, endOnFailure: true },
      );
    });
  }
});
