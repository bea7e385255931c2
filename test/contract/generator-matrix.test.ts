import { execFile } from 'node:child_process';
import { cp, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { contractFetch } from '../helpers/contract.ts';
import { DOCUMENT, startPrism, type PrismMock } from '../helpers/prism.ts';
import { generateClients } from './generator-matrix/generate.ts';

/**
 * The document as an SDK team meets it: clients generated with openapi-typescript + openapi-fetch,
 * @hey-api/openapi-ts and orval (generator-matrix/generate.ts, into a temporary folder), compiled
 * with `tsc --strict` together with probes that must compile and probes that must not
 * (`@ts-expect-error`: a probe that compiles leaves its directive unused, which fails the
 * compilation), then the openapi-fetch client (generator-matrix/sdk/client.ts) run against Prism's mock
 * and against the real server.
 */
const root = path.resolve(import.meta.dirname, '../..');
const sources = path.join(import.meta.dirname, 'generator-matrix', 'sdk');
const TSC = path.join(path.dirname(createRequire(import.meta.url).resolve('typescript/package.json')), 'bin', 'tsc');

/** The chunk of a chat stream, as the generated types say it. */
interface Chunk {
  object: string;
  choices: Array<{ delta: { content?: string | null } }>;
}
/** What the matrix runs of sdk/client.ts (typed there; it compiles only beside the generated code). */
interface Client {
  generatedClient(baseUrl: string, options?: { fetch?: (request: Request) => Promise<Response>; headers?: Record<string, string> }): object;
  managementHappyPaths(client: object): Promise<Record<string, unknown>>;
  chat(client: object, model: string): Promise<{ status: number; object: string | undefined }>;
  streamChat(client: object, request: { model: string; messages: Array<{ role: 'user'; content: string }>; max_tokens?: number }): AsyncGenerator<Chunk>;
  deleteWhilePending(client: object, id: string): Promise<{ status: number; code: string | undefined; bodyStatus: number | undefined }>;
}

/** What the matrix runs of sdk/hey-api-client.ts. */
interface HeyApiClient {
  heyApiHappyPaths(baseUrl: string, session: { headers?: Record<string, string>; fetch?: typeof fetch }, key: { headers?: Record<string, string>; fetch?: typeof fetch }, model: string): Promise<Record<string, unknown>>;
  heyApiTranscribe(baseUrl: string, key: { headers?: Record<string, string> }, model: string): Promise<unknown>;
}

let dir: string;
let client: Client;
let heyApi: HeyApiClient;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'generator-matrix-'));
  // The generated code and the probes import openapi-fetch, zod and the generators' runtimes.
  await symlink(path.join(root, 'node_modules'), path.join(dir, 'node_modules'), 'dir');
  for (const file of await readdir(sources)) await cp(path.join(sources, file), path.join(dir, file));
  await generateClients(DOCUMENT, dir);
  client = (await import(path.join(dir, 'client.ts'))) as Client;
  heyApi = (await import(path.join(dir, 'hey-api-client.ts'))) as HeyApiClient;
}, 120_000);

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('the generator matrix', () => {
  it('generates no numbered duplicate names (a schema clashing with a name a generator derives)', async () => {
    const files = ['openapi-typescript/api.ts', 'hey-api/types.gen.ts', 'hey-api/zod.gen.ts', 'orval/api.ts'];
    const declared = await Promise.all(
      files.map(async (file) => {
        const text = await readFile(path.join(dir, 'out', file), 'utf8');
        return [...text.matchAll(/^export (?:type|interface|const|enum) (\w+)/gm), ...text.matchAll(/^ {8}(\w+): \{$/gm)].map((match) => match[1] as string);
      }),
    );
    const names = new Set(declared.flat());
    // A name ending in a counter (not a 3-digit HTTP status) whose stem is also declared: a generator renamed a clash.
    const numbered = [...names].filter((name) => /\D\d{1,2}$/.test(name) && names.has(name.replace(/\d+$/, '')));
    expect(names.size).toBeGreaterThan(100);
    expect(numbered).toEqual([]);
  });

  it('compiles all three clients with tsc --strict: the must-pass probes compile, the must-fail probes do not', async () => {
    const tsconfig = {
      compilerOptions: {
        strict: true,
        noEmit: true,
        target: 'es2023',
        lib: ['es2023', 'dom', 'dom.iterable'],
        module: 'esnext',
        moduleResolution: 'bundler',
        allowImportingTsExtensions: true,
        // Declaration files of node_modules only; every generated file is a .ts file and is checked.
        skipLibCheck: true,
        types: [],
      },
      include: ['*.ts', 'out/**/*.ts'],
    };
    await writeFile(path.join(dir, 'tsconfig.json'), JSON.stringify(tsconfig));
    const compiled = await promisify(execFile)(process.execPath, [TSC, '-p', path.join(dir, 'tsconfig.json')], { cwd: dir }).then(
      () => '',
      (error: { stdout?: string }) => error.stdout ?? String(error),
    );
    expect(compiled).toBe('');
    const probes = (await Promise.all(['openapi-fetch', 'hey-api', 'orval'].map((name) => readFile(path.join(dir, `probes-${name}.ts`), 'utf8')))).join('\n');
    expect(probes.match(/@ts-expect-error an unknown field on a strict body/g)).toHaveLength(3);
    expect(probes.match(/@ts-expect-error a missing required field/g)).toHaveLength(3);
  }, 120_000);
});

interface Operation {
  operationId: string;
  parameters?: Array<{ name: string; in: string; required?: boolean; schema?: { format?: string; type?: string } }>;
  requestBody?: { content: Record<string, { example?: unknown; examples?: Record<string, { value: unknown }> }> };
  security?: Array<Record<string, string[]>>;
  responses: Record<string, { 'x-error-codes'?: string[] }>;
  'x-error-format'?: string;
}

/** A value Prism's request validation accepts for a path parameter. */
function pathValue(parameter: NonNullable<Operation['parameters']>[number]): string {
  if (parameter.schema?.format === 'uuid') return '0192f1c6-2b9e-7c4e-9b1a-5d0c8e6f7a21';
  if (parameter.schema?.type === 'integer') return '311';
  return 'sample';
}

/** A request to `operation` that Prism accepts, asking for `status` with `Prefer: code=N`. */
function requestFor(base: string, route: string, method: string, operation: Operation, status: string): Request {
  let url = route;
  for (const parameter of operation.parameters ?? []) if (parameter.in === 'path') url = url.replace(`{${parameter.name}}`, pathValue(parameter));
  const headers = new Headers({ Prefer: `code=${status}`, Cookie: 'session=contract-test', 'X-CSRF-Token': 'contract-test' });
  if (operation['x-error-format'] === 'inference') headers.set('Authorization', 'Bearer svc-sk-contract-test');
  for (const parameter of operation.parameters ?? []) if (parameter.in === 'header' && parameter.required) headers.set(parameter.name, 'sample');
  let body: string | FormData | undefined;
  const content = operation.requestBody?.content ?? {};
  if (content['application/json']) {
    const media = content['application/json'];
    headers.set('Content-Type', 'application/json');
    body = JSON.stringify(media.example ?? Object.values(media.examples ?? {})[0]?.value ?? {});
  } else if (content['multipart/form-data']) {
    const form = new FormData();
    form.append('model', 'whisper-large-v3');
    form.append('file', new Blob([new Uint8Array(64)], { type: 'audio/wav' }), 'hello.wav');
    body = form;
  }
  return new Request(new URL(url, base), { method: method.toUpperCase(), headers, body });
}

describe('the typed client against Prism', () => {
  let prism: PrismMock;
  beforeAll(async () => {
    prism = await startPrism();
  }, 90_000);
  afterAll(() => prism?.close());

  it('runs the happy paths', async () => {
    const session = client.generatedClient(prism.url, { headers: { Cookie: 'session=contract-test', 'X-CSRF-Token': 'contract-test' } });
    expect(await client.managementHappyPaths(session)).toEqual({ health: 'ok', total: 1, created: 'requested', createdStatus: 201 });
    const key = client.generatedClient(prism.url, { headers: { Authorization: 'Bearer svc-sk-contract-test' } });
    expect(await client.chat(key, 'qwen2.5-instruct')).toEqual({ status: 200, object: 'chat.completion' });
  });

  it('runs the happy paths on the hey-api SDK, its zod schemas validating each request and answer', async () => {
    const session = { headers: { Cookie: 'session=contract-test', 'X-CSRF-Token': 'contract-test' } };
    const key = { headers: { Authorization: 'Bearer svc-sk-contract-test' } };
    expect(await heyApi.heyApiHappyPaths(prism.url, session, key, 'qwen2.5-instruct')).toEqual({ health: 'ok', total: 1, created: 'requested', chat: 'chat.completion' });
    expect(await heyApi.heyApiTranscribe(prism.url, key, 'whisper-large-v3')).toBe('Thanks for calling. Your order shipped this morning.');
  });

  it('reads the mocked chat stream as typed chunks', async () => {
    const key = client.generatedClient(prism.url, { headers: { Authorization: 'Bearer svc-sk-contract-test' } });
    const chunks = [];
    for await (const chunk of client.streamChat(key, { model: 'qwen2.5-instruct', messages: [{ role: 'user', content: 'hi' }] })) chunks.push(chunk);
    expect(chunks.map((chunk) => [chunk.object, chunk.choices[0]?.delta.content])).toEqual([['chat.completion.chunk', 'Paris']]);
  });

  it('answers a typed error a client can branch on: Prefer code=409 on delete is DEPLOYMENT_DELETION_PENDING', async () => {
    const session = client.generatedClient(prism.url, { headers: { Cookie: 'session=contract-test', 'X-CSRF-Token': 'contract-test' } });
    expect(await client.deleteWhilePending(session, '0192f1c6-2b9e-7c4e-9b1a-5d0c8e6f7a21')).toEqual({ status: 409, code: 'DEPLOYMENT_DELETION_PENDING', bodyStatus: 409 });
  });

  it('answers every documented error status of every operation with a body of that status and a code documented for it', async () => {
    const document = JSON.parse(await readFile(DOCUMENT, 'utf8')) as { paths: Record<string, Record<string, Operation>> };
    const wrong: string[] = [];
    let asked = 0;
    for (const [route, item] of Object.entries(document.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        for (const [status, response] of Object.entries(operation.responses)) {
          const codes = response['x-error-codes'];
          if (!codes || status === 'default') continue;
          asked += 1;
          const answer = await fetch(requestFor(prism.url, route, method, operation, status));
          const body = (await answer.json()) as { status?: number; code?: string; error?: { code?: string } };
          const code = body.error ? body.error.code : body.code;
          const statusOk = answer.status === Number(status) && (body.error !== undefined || body.status === Number(status));
          if (!statusOk || !codes.includes(code ?? '')) wrong.push(`${method.toUpperCase()} ${route} ${status}: answered ${answer.status} ${JSON.stringify(body).slice(0, 160)}`);
        }
      }
    }
    expect(asked).toBeGreaterThan(200);
    expect(wrong).toEqual([]);
  }, 60_000);
});

describe('the typed client against the real server', () => {
  let app: TestApp;
  let owner: SignedInUser;
  let model: string;
  let key: string;

  beforeAll(async () => {
    app = await startTestApp(FAST_PROVISIONING, { workers: true, cluster: { modelLoadMs: 50, tokenLatencyMs: 2 } });
    owner = await registeredUser(app);
    model = (await deployment(app, owner, 'running', { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 })).id;
    key = (await apiKey(owner, [model])).key;
  }, 90_000);
  afterAll(() => app?.close());

  // Every answer is checked against the document on the way (contractFetch).
  const sessionClient = () => client.generatedClient(app.url, { fetch: (request) => contractFetch(app.url, (input) => owner.browser.fetch(input as Request))(request) });
  const keyClient = () => client.generatedClient(app.url, { fetch: (request) => contractFetch(app.url)(request), headers: { Authorization: `Bearer ${key}` } });

  it('runs the happy paths with the session, and a chat completion with the API key', async () => {
    expect(await client.managementHappyPaths(sessionClient())).toEqual({ health: 'ok', total: 1, created: 'requested', createdStatus: 201 });
    expect(await client.chat(keyClient(), model)).toEqual({ status: 200, object: 'chat.completion' });
  });

  it('runs the happy paths on the hey-api SDK, its zod schemas validating each request and answer', async () => {
    const session = { fetch: contractFetch(app.url, (input, init) => owner.browser.fetch(new Request(input, init))) as typeof fetch };
    const keyed = { headers: { Authorization: `Bearer ${key}` }, fetch: contractFetch(app.url) as typeof fetch };
    expect(await heyApi.heyApiHappyPaths(app.url, session, keyed, model)).toEqual({ health: 'ok', total: 2, created: 'requested', chat: 'chat.completion' });
  });

  it('reads a streamed chat completion chunk by chunk, each a typed ChatCompletionChunk', async () => {
    const pieces: string[] = [];
    for await (const chunk of client.streamChat(keyClient(), { model, messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 8 })) {
      expect(chunk.object).toBe('chat.completion.chunk');
      pieces.push(chunk.choices[0]?.delta.content ?? '');
    }
    expect(pieces.filter(Boolean).length).toBeGreaterThan(3);
  });
});
