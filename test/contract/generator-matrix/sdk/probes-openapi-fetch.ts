// Compiled (tsc --strict) against the client openapi-typescript generates, with openapi-fetch.
// Each `@ts-expect-error` is a probe that must fail to compile: were it to compile, tsc reports the
// directive as unused and the matrix fails.
import createClient from 'openapi-fetch';
import type { components, paths } from './out/openapi-typescript/api.ts';

const client = createClient<paths>({ baseUrl: 'http://localhost:8080' });

/** Multipart bodies: openapi-fetch sends JSON unless told; the serializer of docs/api-for-sdk-teams.md. */
const formData = (body: Record<string, unknown>) => {
  const form = new FormData();
  for (const [name, value] of Object.entries(body)) if (value !== undefined) form.append(name, value instanceof Blob ? value : String(value));
  return form;
};

export async function mustCompile(): Promise<void> {
  await client.POST('/api/v1/model-deployments', { body: { model_name: 'qwen2.5-instruct', model_size_in_billions: '7' } });
  await client.POST('/v1/chat/completions', { body: { model: 'qwen2.5-instruct', messages: [{ role: 'user', content: 'hi' }] } });
  await client.POST('/v1/audio/transcriptions', { body: { file: new Blob(['RIFF']), model: 'whisper-large-v3' }, bodySerializer: formData });
  const stage: components['schemas']['Deployment']['failure_stage'] = null;
  const usage: components['schemas']['ChatCompletionChunk']['usage'] = null;
  void [stage, usage];
}

type CreateDeploymentRequest = components['schemas']['CreateDeploymentRequest'];

export async function mustNotCompile(): Promise<void> {
  // openapi-fetch infers its init argument generically, so an inline literal escapes TypeScript's
  // excess-property check: a body is declared with its schema type (docs/api-for-sdk-teams.md: generator settings).
  // @ts-expect-error an unknown field on a strict body
  const strict: CreateDeploymentRequest = { model_name: 'qwen2.5-instruct', gpu: 'h100' };
  await client.POST('/api/v1/model-deployments', { body: strict });
  // @ts-expect-error a missing required field
  await client.POST('/api/v1/model-deployments', { body: { model_format: 'pytorch' } });
  // @ts-expect-error a value outside a nullable enum
  const stage: components['schemas']['Deployment']['failure_stage'] = 'somewhere';
  // @ts-expect-error a string where the upload needs a Blob
  await client.POST('/v1/audio/transcriptions', { body: { file: 'RIFF', model: 'whisper-large-v3' }, bodySerializer: formData });
  void stage;
}
