/**
 * The three generators of the matrix, each with the settings docs/api-for-sdk-teams.md gives SDK teams, writing
 * into `<dir>/out/`. Everything runs in-process and offline.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { createClient } from '@hey-api/openapi-ts';
import openapiTS, { astToString } from 'openapi-typescript';
import { generate as orval } from 'orval';
import ts from 'typescript';

/** openapi-typescript: `format: binary` as `Blob` (its documented transform), defaults not made required. */
async function openapiTypescript(document: string, out: string): Promise<void> {
  const blob = ts.factory.createTypeReferenceNode(ts.factory.createIdentifier('Blob'));
  const ast = await openapiTS(new URL(`file://${document}`), {
    defaultNonNullable: false,
    transform: (schema) => (schema.format === 'binary' ? blob : undefined),
  });
  await mkdir(out, { recursive: true });
  // A .ts file (types only), so `tsc --strict` checks it instead of skipping it as a declaration file.
  await writeFile(path.join(out, 'api.ts'), astToString(ast));
}

/** The zod plugin's resolver for `format: binary`: `z.instanceof(Blob)` instead of `z.string()`. */
interface StringResolverContext {
  schema: { format?: string };
  $: ((name: unknown) => { attr(name: string): { call(...args: unknown[]): unknown } }) & ((name: string) => unknown);
  plugin: { imports: { z: unknown } };
}
const blobResolver = (ctx: StringResolverContext) => (ctx.schema.format === 'binary' ? ctx.$(ctx.plugin.imports.z).attr('instanceof').call(ctx.$('Blob')) : undefined);

/** @hey-api/openapi-ts: types, the fetch client, an SDK that validates with zod. */
async function heyApi(document: string, out: string): Promise<void> {
  await createClient({
    input: document,
    output: out,
    logs: { level: 'silent' },
    plugins: ['@hey-api/typescript', '@hey-api/client-fetch', { name: '@hey-api/sdk', validator: true }, { name: 'zod', '~resolvers': { string: blobResolver } } as never],
  });
}

/** orval: the fetch client in one file. */
async function orvalFetch(document: string, out: string): Promise<void> {
  await orval({ input: { target: document }, output: { target: path.join(out, 'api.ts'), client: 'fetch', mode: 'single' } });
}

/** Generates the three clients from `document` into `<dir>/out/{openapi-typescript,hey-api,orval}`. */
export async function generateClients(document: string, dir: string): Promise<void> {
  const out = (name: string) => path.join(dir, 'out', name);
  // One after the other: orval and hey-api both format and log through shared globals.
  await openapiTypescript(document, out('openapi-typescript'));
  await heyApi(document, out('hey-api'));
  await orvalFetch(document, out('orval'));
}
